//! The SQL fragments in which SQLite differs from PostgreSQL, as macros for
//! `concat!` in the modules of `store/sql` (see `store/mod.rs`): its single
//! writer locks nothing, and its planner takes hints.

macro_rules! for_update {
    () => {
        ""
    };
}

macro_rules! for_share {
    () => {
        ""
    };
}

macro_rules! indexed_by {
    ($index:literal) => {
        concat!(" INDEXED BY ", $index)
    };
}

/// The function that finds a text in another (`instr(haystack, needle)`).
macro_rules! position {
    () => {
        "instr"
    };
}

/// The elements of a JSON array, as a table whose column `value` holds each.
macro_rules! json_elements {
    ($array:literal) => {
        concat!("json_each(", $array, ")")
    };
}

/// Whether `$col` is one of the ids of the JSON array `$array` (their text).
macro_rules! id_in_json {
    ($col:literal, $array:literal) => {
        concat!($col, " IN (SELECT value FROM json_each(", $array, "))")
    };
}

/// Whether a token's `hash` starts with the prefix `$prefix`, as a range
/// of the unique index on `hash` (hashes are lowercase hex).
macro_rules! hash_prefix {
    ($prefix:literal) => {
        concat!("hash >= ", $prefix, " AND hash < ", $prefix, " || 'g'")
    };
}

/// Whether the token id `$id` is the first part of an agent name `<token id>/<name>`.
macro_rules! token_of_agent {
    ($id:literal, $agent:literal) => {
        concat!(
            $id,
            " = substr(",
            $agent,
            ", 1, instr(",
            $agent,
            ", '/') - 1)"
        )
    };
}

/// A quest's review decisions, oldest first, as the text of one JSON array
/// of `{reviewer, decision, look, note}` (NULL without any).
macro_rules! review_decisions_json {
    ($quest:literal) => {
        concat!(
            "(SELECT CASE WHEN count(*) > 0 THEN json_group_array(json_object('reviewer', d.reviewer, \
             'decision', d.decision, 'look', d.look, 'note', d.note) ORDER BY d.created_at, d.id) END \
             FROM review_decisions d WHERE d.quest_id = ",
            $quest,
            ")"
        )
    };
}

/// A quest's copy of its session's `max_tries`: a column on PostgreSQL
/// only (SQLite's trigger reads the session's), so nothing here.
macro_rules! quest_max_tries {
    ($sep:literal, $value:literal) => {
        ""
    };
}
