use super::*;

#[test]
fn the_client_state_dir_follows_xdg_then_home() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| std::ffi::OsString::from(v))
        }
    };
    let both = vars(&[("XDG_STATE_HOME", "/x"), ("HOME", "/h")]);
    assert_eq!(state_dir_from(&both), PathBuf::from("/x/quest"));
    let empty_xdg = vars(&[("XDG_STATE_HOME", ""), ("HOME", "/h")]);
    assert_eq!(
        state_dir_from(&empty_xdg),
        PathBuf::from("/h/.local/state/quest")
    );
    assert_eq!(state_dir_from(&vars(&[])), PathBuf::from(".quest"));
}
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    config: Config,
}

fn parse(args: &[&str]) -> Result<Config, clap::Error> {
    Cli::try_parse_from(std::iter::once("quest").chain(args.iter().copied())).map(|c| c.config)
}

fn no_file() -> EmailFileSettings {
    EmailFileSettings::default()
}

#[test]
fn the_gate_settings_default_to_the_system_resolver_and_no_exemptions() {
    let c = parse(&[]).unwrap();
    let d = Config::with_data_dir("./quest-data");
    assert_eq!(
        c.email_settings(&no_file()),
        EmailSettings {
            dns_servers: vec![],
            fetch_allow: vec![],
            fetch_timeout: Duration::from_millis(15_000),
            dns_timeout: Duration::from_millis(5_000),
        }
    );
    assert_eq!(
        format!("{c:?}"),
        format!("{d:?}"),
        "with_data_dir holds the same defaults"
    );
}

#[test]
fn dns_servers_and_allowed_ranges_are_comma_separated() {
    let c = parse(&[
        "--dns-servers",
        "127.0.0.1:5353, [::1]:53,10.0.0.2",
        "--fetch-allow",
        "127.0.0.0/8,::1",
        "--fetch-timeout-ms",
        "2000",
        "--dns-timeout-ms",
        "700",
    ])
    .unwrap()
    .email_settings(&no_file());
    assert_eq!(
        c.dns_servers,
        ["127.0.0.1:5353", "[::1]:53", "10.0.0.2:53"].map(|s| s.parse::<SocketAddr>().unwrap())
    );
    assert_eq!(
        c.fetch_allow,
        ["127.0.0.0/8", "::1/128"].map(|s| s.parse::<IpNet>().unwrap())
    );
    assert_eq!(
        (c.fetch_timeout, c.dns_timeout),
        (Duration::from_millis(2000), Duration::from_millis(700))
    );
}

#[test]
fn an_empty_list_means_none() {
    let c = parse(&["--dns-servers", "", "--fetch-allow", " , "]).unwrap();
    assert_eq!(c.dns_servers.as_deref(), Some(&[][..]));
    assert_eq!(c.fetch_allow.as_deref(), Some(&[][..]));
    let s = c.email_settings(&no_file());
    assert!(s.dns_servers.is_empty() && s.fetch_allow.is_empty());
}

const EMAIL_FILE: &str = r#"
        [email]
        dns_servers = ["127.0.0.1:5353", "10.0.0.2"]
        fetch_allow = ["127.0.0.0/8", "::1"]
        fetch_timeout_ms = 9000
        dns_timeout_ms = 800
    "#;

#[test]
fn the_file_sets_the_email_gate_settings_and_variables_or_flags_win() {
    let file = OperatorConfig::parse(EMAIL_FILE, &env).unwrap().email;
    assert_eq!(
        file,
        EmailFileSettings {
            dns_servers: Some(vec![
                "127.0.0.1:5353".parse().unwrap(),
                "10.0.0.2:53".parse().unwrap()
            ]),
            fetch_allow: Some(vec![
                "127.0.0.0/8".parse().unwrap(),
                "::1/128".parse().unwrap()
            ]),
            fetch_timeout_ms: Some(9000),
            dns_timeout_ms: Some(800),
        }
    );
    // defaults < file
    let from_file = parse(&[]).unwrap().email_settings(&file);
    assert_eq!(from_file.dns_servers, file.dns_servers.clone().unwrap());
    assert_eq!(from_file.fetch_allow, file.fetch_allow.clone().unwrap());
    assert_eq!(
        (from_file.fetch_timeout, from_file.dns_timeout),
        (Duration::from_millis(9000), Duration::from_millis(800))
    );
    // file < QUEST_* variables and flags (one clap argument each), an empty
    // list included: `QUEST_FETCH_ALLOW=` takes the file's exemptions away.
    let overridden = parse(&[
        "--dns-servers",
        "127.0.0.1:53",
        "--fetch-allow",
        "",
        "--fetch-timeout-ms",
        "2000",
    ])
    .unwrap()
    .email_settings(&file);
    assert_eq!(
        overridden.dns_servers,
        ["127.0.0.1:53".parse::<SocketAddr>().unwrap()]
    );
    assert!(overridden.fetch_allow.is_empty());
    assert_eq!(overridden.fetch_timeout, Duration::from_millis(2000));
    assert_eq!(
        overridden.dns_timeout,
        Duration::from_millis(800),
        "not overridden"
    );
    // A file without the table leaves the defaults.
    assert_eq!(
        OperatorConfig::parse(FILE, &env).unwrap().email,
        EmailFileSettings::default()
    );
}

#[test]
fn bad_email_settings_in_the_file_name_their_key() {
    for (text, at) in [
        (
            "[email]\ndns_servers = [\"localhost:53\"]",
            "email.dns_servers[0]",
        ),
        (
            "[email]\nfetch_allow = [\"127.0.0.0/8\", \"bogus\"]",
            "email.fetch_allow[1]",
        ),
        ("[email]\nfetch_timeout_ms = 0", "email.fetch_timeout_ms"),
        ("[email]\ndns_timeout_ms = 60001", "email.dns_timeout_ms"),
    ] {
        assert_eq!(
            OperatorConfig::parse(text, &env).unwrap_err().at,
            at,
            "{text}"
        );
    }
    for text in [
        "[email]\ndns_servers = \"127.0.0.1:53\"",
        "[email]\nfetch_timeout = 5",
    ] {
        assert_eq!(
            OperatorConfig::parse(text, &env).unwrap_err().at,
            "toml",
            "{text}"
        );
    }
}

#[test]
fn bad_gate_settings_are_refused_with_a_clear_message() {
    for (args, says) in [
        (
            ["--dns-servers", "localhost:53"],
            "not a DNS server address",
        ),
        (["--fetch-allow", "10.0.0.0/33"], "not a CIDR range"),
        (
            ["--fetch-allow", "127.0.0.0/8,bogus"],
            "`bogus` is not a CIDR range",
        ),
        (["--fetch-timeout-ms", "0"], "fetch-timeout-ms"),
        (["--dns-timeout-ms", "soon"], "dns-timeout-ms"),
    ] {
        let err = parse(&args).err().unwrap().to_string();
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn debug_output_redacts_the_admin_token() {
    let mut c = Config::with_data_dir("d");
    c.admin_token = Some("s3cret".into());
    let shown = format!("{c:?}");
    assert!(!shown.contains("s3cret") && shown.contains("<redacted>"));
}

fn env(name: &str) -> Option<String> {
    match name {
        "ALPHA_KEY" => Some("sk-alpha-secret".into()),
        "PATH" => Some("/usr/bin:/bin".into()),
        _ => None,
    }
}

const FILE: &str = r#"
        [verifiers.alpha]
        kind = "openai"
        base_url = "http://127.0.0.1:9001/v1/"
        model = "judge-a"
        api_key_env = "ALPHA_KEY"
        max_concurrency = 2
        timeout_ms = 1500

        [verifiers.local]
        kind = "command"
        argv = ["/usr/local/bin/judge", "--strict"]
        env = ["PATH", "UNSET_VAR"]
        allow_root = true

        [gates.coverage]
        kind = "command"
        argv = ["/srv/check-coverage.sh"]
        allow_root = true
        timeout_ms = 60000
        result_fields = ["test_file"]
        questions = ["Does the test assert nothing?", {text = "Does it test the named function?", flag_on = "no"}]
    "#;

#[test]
fn the_file_declares_verifiers_and_command_gates() {
    let c = OperatorConfig::parse(FILE, &env).unwrap();
    assert_eq!(c.verifiers.len(), 2);
    let alpha = &c.verifiers[0];
    assert_eq!((alpha.name.as_str(), alpha.max_concurrency), ("alpha", 2));
    assert_eq!(alpha.timeout, Duration::from_millis(1500));
    let VerifierBackend::OpenAi {
        base_url, api_key, ..
    } = &alpha.backend
    else {
        panic!("openai")
    };
    assert_eq!(base_url, "http://127.0.0.1:9001/v1");
    assert_eq!(api_key.as_ref().unwrap().expose(), "sk-alpha-secret");
    let VerifierBackend::Command { process, model } = &c.verifiers[1].backend else {
        panic!("command")
    };
    assert_eq!(model, "/usr/local/bin/judge");
    assert_eq!(
        process.env,
        vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())]
    );
    assert_eq!(
        c.verifiers[1].timeout,
        Duration::from_secs(20),
        "the default"
    );
    let gate = &c.gates[0];
    assert_eq!(gate.name, "coverage");
    assert_eq!(gate.result_fields, ["test_file"]);
    assert_eq!(gate.questions[1].flag_on, crate::domain::verify::FlagOn::No);
    assert!(gate.process.env.is_empty(), "the environment is cleared");
}

#[test]
fn a_verifier_may_change_or_leave_out_max_tokens_and_temperature() {
    let backend = |extra: &str| {
        let text = format!(
            "[verifiers.a]\nkind = \"openai\"\nbase_url = \"http://h.test/v1\"\nmodel = \"m\"\n{extra}"
        );
        OperatorConfig::parse(&text, &env).map(|c| c.verifiers[0].backend.clone())
    };
    let sampling = |extra: &str| match backend(extra).unwrap() {
        VerifierBackend::OpenAi { sampling, .. } => sampling,
        other => panic!("{other:?}"),
    };
    assert_eq!(sampling(""), Sampling::DEFAULT);
    assert_eq!(
        sampling("max_tokens = 2000\ntemperature = 0.7"),
        Sampling {
            max_tokens: Some(2000),
            temperature: Some(0.7)
        }
    );
    assert_eq!(
        sampling("omit = [\"max_tokens\", \"temperature\"]"),
        Sampling {
            max_tokens: None,
            temperature: None
        }
    );
    for bad in [
        "omit = [\"top_p\"]",
        "omit = [\"temperature\"]\ntemperature = 1.0",
        "temperature = 3.0",
    ] {
        assert_eq!(backend(bad).unwrap_err().at, "verifiers.a", "{bad}");
    }
}

#[test]
fn secrets_never_show_in_debug_output() {
    let c = OperatorConfig::parse(FILE, &env).unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("sk-alpha-secret") && shown.contains("<redacted>"),
        "{shown}"
    );
}

#[test]
fn credentials_in_a_base_url_never_show_in_debug_output() {
    let text = "[verifiers.a]\nkind = \"openai\"\nbase_url = \"https://quest:hunter2@llm.test/v1?key=sk-q\"\nmodel = \"m\"";
    let c = OperatorConfig::parse(text, &env).unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("sk-q") && !shown.contains("quest:"),
        "{shown}"
    );
    assert!(shown.contains("https://***@llm.test/v1?***"), "{shown}");
    assert_eq!(redact_url("http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1");
    assert_eq!(redact_url("http://user@h.test/"), "http://***@h.test/");
    assert_eq!(redact_url("not a url with pw"), "<not a URL>");
}

#[test]
fn a_command_gate_declares_its_verdict_channel_limits_and_user() {
    let root = System {
        is_root: true,
        passwd: "root:x:0:0::/root:/bin/sh\nrunner:x:1500:1600::/nonexistent:/usr/sbin/nologin\n"
            .into(),
    };
    let text = "[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]\nverdict = \"fd\"\n\
                    cpu_seconds = 30\naddress_space_mb = 512\nopen_files = 64\n\
                    file_size_mb = 8\nnproc = 32\nuser = \"runner\"";
    let c = OperatorConfig::parse_on(text, &env, &root).unwrap();
    let gate = &c.gates[0];
    assert_eq!(gate.verdict, VerdictChannel::Fd);
    assert!(gate.process.verdict_fd);
    assert_eq!(
        gate.process.limits,
        Limits {
            cpu_seconds: Some(30),
            address_space: Some(512 << 20),
            open_files: Some(64),
            file_size: Some(8 << 20),
            processes: Some(32),
        }
    );
    assert_eq!(
        gate.process.user,
        Some(RunAs {
            name: "runner".into(),
            uid: 1500,
            gid: 1600
        })
    );
    let plain = OperatorConfig::parse_on(
        "[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]\nallow_root = true",
        &env,
        &root,
    )
    .unwrap();
    assert_eq!(plain.gates[0].verdict, VerdictChannel::Stdout);
    assert!(plain.gates[0].process.limits.is_empty() && plain.gates[0].process.user.is_none());
    for (user, uid, gid) in [
        ("1500", 1500, 1600),
        ("77:88", 77, 88),
        ("4242", 4242, 4242),
    ] {
        let text =
            format!("[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]\nuser = \"{user}\"");
        let user = OperatorConfig::parse_on(&text, &env, &root).unwrap().gates[0]
            .process
            .user
            .clone()
            .unwrap();
        assert_eq!((user.uid, user.gid), (uid, gid));
    }

    let refused =
        |text: &str, system: &System| OperatorConfig::parse_on(text, &env, system).unwrap_err();
    let gate =
        |extra: &str| format!("[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]\n{extra}");
    let err = refused(&gate("user = \"nosuch\""), &root);
    assert!(
        err.at == "gates.c" && err.message.contains("no user of this machine"),
        "{err}"
    );
    let not_root = System {
        is_root: false,
        ..root
    };
    let err = refused(&gate("user = \"runner\""), &not_root);
    assert!(
        err.message.contains("needs the server to run as root"),
        "{err}"
    );
    for extra in [
        "cpu_seconds = 0",
        "address_space_mb = 1",
        "open_files = 2",
        "file_size_mb = 0",
    ] {
        let err = refused(&gate(extra), &not_root);
        assert!(
            err.at == "gates.c" && err.message.contains("is not between"),
            "{extra}: {err}"
        );
    }
    let err = refused(&gate("nproc = 16"), &not_root);
    assert!(
        err.at == "gates.c" && err.message.contains("needs `user`"),
        "nproc only with a user of its own: {err}"
    );
    let err = refused(&gate("verdict = \"stderr\""), &not_root);
    assert!(
        err.at == "gates.c" && err.message.contains("neither"),
        "{err}"
    );
}

#[test]
fn the_retired_verdict_file_is_refused_with_the_setting_that_replaces_it() {
    let not_root = System {
        is_root: false,
        passwd: String::new(),
    };
    let text = "[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]\nverdict = \"file\"";
    let err = OperatorConfig::parse_on(text, &env, &not_root).unwrap_err();
    assert_eq!(err.at, "gates.c");
    assert!(err.message.contains("verdict = \"fd\""), "{err}");
}

#[test]
fn a_root_server_refuses_a_command_gate_or_verifier_without_user_or_allow_root() {
    let root = System {
        is_root: true,
        passwd: "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n".into(),
    };
    let gate = "[gates.tests]\nkind = \"command\"\nargv = [\"/bin/true\"]\n";
    let verifier = "[verifiers.judge]\nkind = \"command\"\nargv = [\"/bin/true\"]\n";
    for (text, at) in [(gate, "gates.tests"), (verifier, "verifiers.judge")] {
        let err = OperatorConfig::parse_on(text, &env, &root).unwrap_err();
        assert_eq!(err.at, at, "the error names the table");
        assert!(
            err.message.contains("runs as root") && err.message.contains("allow_root"),
            "{err}"
        );
        for extra in ["user = \"nobody\"", "allow_root = true"] {
            let text = format!("{text}{extra}");
            assert!(
                OperatorConfig::parse_on(&text, &env, &root).is_ok(),
                "{at} with {extra}"
            );
        }
        let not_root = System {
            is_root: false,
            passwd: String::new(),
        };
        assert!(OperatorConfig::parse_on(text, &env, &not_root).is_ok());
    }
    let c = OperatorConfig::parse_on(&format!("{verifier}user = \"nobody\""), &env, &root).unwrap();
    match &c.verifiers[0].backend {
        VerifierBackend::Command { process, .. } => {
            assert_eq!(process.user.as_ref().map(|u| u.uid), Some(65534));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unusable_files_are_refused_with_the_table_named() {
    for (text, at) in [
        (
            "[verifiers.a]\nkind = \"openai\"\nbase_url = \"http://h/v1\"\nmodel = \"m\"\napi_key_env = \"NOPE\"",
            "verifiers.a",
        ),
        (
            "[verifiers.a]\nkind = \"openai\"\nbase_url = \"ftp://h\"\nmodel = \"m\"",
            "verifiers.a",
        ),
        (
            "[verifiers.\"a b\"]\nkind = \"command\"\nargv = [\"x\"]",
            "verifiers.a b",
        ),
        ("[gates.c]\nkind = \"command\"\nargv = []", "gates.c"),
        (
            "[gates.c]\nkind = \"command\"\nargv = [\"x\"]\ntimeout_ms = 0",
            "gates.c",
        ),
        (
            "[verifiers.a]\nkind = \"command\"\nargv = [\"x\"]\nmax_concurrency = 0",
            "verifiers.a",
        ),
        (
            "[gates.c]\nkind = \"command\"\nargv = [\"x\"]\nresult_fields = [\"/test/code\"]",
            "gates.c",
        ),
        (
            "[gates.c]\nkind = \"command\"\nargv = [\"x\"]\nresult_fields = [\"test.code\"]",
            "gates.c",
        ),
    ] {
        assert_eq!(
            OperatorConfig::parse(text, &env).unwrap_err().at,
            at,
            "{text}"
        );
    }
    for text in [
        "[verifiers.a]\nkind = \"openai\"\nbase_url = \"http://h\"\nmodel = \"m\"\napi_key = \"inline\"",
        "[gates.c]\nkind = \"shell\"\nargv = [\"x\"]",
        "[other]\nx = 1",
    ] {
        assert_eq!(
            OperatorConfig::parse(text, &env).unwrap_err().at,
            "toml",
            "{text}"
        );
    }
}

#[test]
fn a_postgres_url_from_a_flag_or_the_file_selects_postgres_and_sqlite_stays_the_default() {
    let mut c = Config::with_data_dir("d");
    let none = DatabaseFileSettings::default();
    assert_eq!(
        c.database(&none),
        Ok(Database::Sqlite(PathBuf::from("d").join("quest.db")))
    );
    let file = DatabaseFileSettings {
        url: Some("postgres://q@db.internal/quest".into()),
    };
    let Ok(Database::Postgres(url)) = c.database(&file) else {
        panic!("the file's url selects PostgreSQL")
    };
    assert_eq!(url.expose(), "postgres://q@db.internal/quest");
    c.database_url = Some("postgresql://q:hunter2@127.0.0.1:5432/other".into());
    let Ok(Database::Postgres(url)) = c.database(&file) else {
        panic!("the flag selects PostgreSQL")
    };
    assert!(
        url.expose().ends_with("/other"),
        "the flag wins over the file"
    );
    assert!(
        !format!("{url} {url:?} {c:?}").contains("hunter2"),
        "the password is never shown"
    );
    c.database_url = Some("   ".into());
    assert!(
        matches!(c.database(&file), Ok(Database::Postgres(_))),
        "blank is unset"
    );
}

#[test]
fn a_database_url_that_is_not_postgres_is_refused_with_what_to_write() {
    let mut c = Config::with_data_dir("d");
    for bad in ["mysql://x/y", "quest.db", "postgres://[bad"] {
        c.database_url = Some(bad.into());
        let err = c.database(&DatabaseFileSettings::default()).unwrap_err();
        assert!(
            err.contains("postgres://USER@HOST:PORT/DATABASE"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn the_file_may_name_the_database() {
    let c = OperatorConfig::parse("[database]\nurl = \"postgres://q@h/d\"\n", &|_| None).unwrap();
    assert_eq!(c.database.url.as_deref(), Some("postgres://q@h/d"));
    assert!(OperatorConfig::parse("[database]\nuri = \"x\"\n", &|_| None).is_err());
}
