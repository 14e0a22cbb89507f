//! The SQL fragments in which PostgreSQL differs from SQLite, as macros
//! for `concat!` in the modules of `store/sql` (see `store/mod.rs`): row
//! locks, where replicas write, and no planner hints.

macro_rules! for_update {
    () => {
        " FOR UPDATE"
    };
}

macro_rules! for_share {
    () => {
        " FOR SHARE"
    };
}

macro_rules! indexed_by {
    ($index:literal) => {
        ""
    };
}

/// The key of the advisory lock of a token (`$2`) in a session (`$1`),
/// under which a pause is decided and a `next` reads the token's pauses.
macro_rules! pause_lock_key {
    () => {
        "hashtextextended($1::text || '/' || $2::text, 0)"
    };
}

/// The advisory lock key of a token's pause in every session (`$1`).
macro_rules! token_pause_lock_key {
    ($token:literal) => {
        concat!("hashtextextended('token pause ' || ", $token, "::text, 0)")
    };
}

/// The function that finds a text in another (`strpos(haystack, needle)`).
macro_rules! position {
    () => {
        "strpos"
    };
}

/// The elements of a JSON array, as a table whose column `value` holds each.
macro_rules! json_elements {
    ($array:literal) => {
        concat!("json_array_elements(", $array, ")")
    };
}

/// Whether `$col` is one of the ids of the JSON array `$array` (their text).
macro_rules! id_in_json {
    ($col:literal, $array:literal) => {
        concat!(
            $col,
            " IN (SELECT value::uuid FROM json_array_elements_text(CAST(",
            $array,
            " AS json)))"
        )
    };
}

/// Whether a token's `hash` starts with the prefix `$prefix`, through the
/// index on `left(hash, 8)` (the prefix is 8 characters).
macro_rules! hash_prefix {
    ($prefix:literal) => {
        concat!("left(hash, 8) = ", $prefix)
    };
}

/// Whether the token id `$id` is the first part of an agent name `<token id>/<name>`.
macro_rules! token_of_agent {
    ($id:literal, $agent:literal) => {
        concat!($id, "::text = split_part(", $agent, ", '/', 1)")
    };
}

/// A quest's review decisions, oldest first, as the text of one JSON array
/// of `{reviewer, decision, look, note}` (NULL without any).
macro_rules! review_decisions_json {
    ($quest:literal) => {
        concat!(
            "(SELECT json_agg(json_build_object('reviewer', d.reviewer, 'decision', d.decision, \
             'look', d.look, 'note', d.note) ORDER BY d.created_at, d.id)::text \
             FROM review_decisions d WHERE d.quest_id = ",
            $quest,
            ")"
        )
    };
}

/// A quest's copy of its session's `max_tries` (a column on PostgreSQL
/// only, where a `CHECK` holds `tries <= max_tries`): `$sep` then `$value`.
macro_rules! quest_max_tries {
    ($sep:literal, $value:literal) => {
        concat!($sep, " ", $value)
    };
}
