//! What a session says once its agents are done: that it is finished, or
//! that people still have work. `next` answers `finished` as soon as no quest
//! is left for an agent (agents must stop); the quests in REVIEW are then a
//! person's, and every surface says so in these words.

/// The words for a session with no quest left for an agent when its counts
/// cannot be read: nothing said of the quests waiting for a person.
pub const AGENTS_DONE: &str = "agents are done: no quest is left for an agent";

/// The words for a session with no quest left for an agent, `review` of
/// them waiting for a person.
pub fn agents_done(review: u64) -> String {
    match review {
        0 => "the session is finished: every quest is decided".to_owned(),
        1 => "agents are done; 1 waits for a person".to_owned(),
        n => format!("agents are done; {n} wait for a person"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backlog_of_reviews_is_not_called_decided() {
        assert_eq!(
            agents_done(0),
            "the session is finished: every quest is decided"
        );
        assert_eq!(agents_done(1), "agents are done; 1 waits for a person");
        assert_eq!(agents_done(200), "agents are done; 200 wait for a person");
    }
}
