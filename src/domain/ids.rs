//! The ids of the product's records, one type each, so that a quest id can
//! never be passed where a lease id is meant. Each is a UUID (v7 when the
//! server makes it, so ids sort by creation time), written as its usual
//! hyphenated text on the wire and in the database.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

macro_rules! id_type {
    ($($(#[$doc:meta])* $name:ident;)+) => {$(
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
        )]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A fresh id, ordered after every id made before it.
            pub fn new() -> $name {
                $name(Uuid::now_v7())
            }

            /// A fresh random id (v4), which tells nothing of when it was made.
            pub fn random() -> $name {
                $name(Uuid::new_v4())
            }

            /// The UUID behind the id.
            pub fn as_uuid(self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> $name {
                $name::new()
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> $name {
                $name(id)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<$name, uuid::Error> {
                Uuid::parse_str(s).map($name)
            }
        }
    )+};
}

id_type! {
    /// An uploaded table and everything done to its rows.
    SessionId;
    /// One row of a session: one work item.
    QuestId;
    /// One agent's hold on one quest.
    LeaseId;
    /// One result an agent submitted.
    SubmissionId;
    /// An API token (its id, never its secret).
    TokenId;
    /// One question put to one AI verifier about one submission.
    L2JobId;
    /// A known-answer item of a session, the template of its gold quests.
    GoldItemId;
    /// One re-check run over a session's PASS quests.
    RecheckRunId;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_back_from_its_text_and_its_json() {
        let id = QuestId::new();
        assert_eq!(id.to_string().parse::<QuestId>().unwrap(), id);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{id}\""));
        assert_eq!(serde_json::from_str::<QuestId>(&json).unwrap(), id);
        assert!("not-a-uuid".parse::<QuestId>().is_err());
    }

    #[test]
    fn new_ids_sort_by_creation() {
        let (a, b) = (LeaseId::new(), LeaseId::new());
        assert!(a < b, "{a} was made before {b}");
    }
}
