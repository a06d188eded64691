//! The `trestle` binary itself: its help, shell completions, and an error's exit code and message
//! (the commands against a server: tests/cli_tool.rs).

use std::process::Command;

fn trestle(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_trestle"))
        .args(args)
        .env_remove("TRESTLE_ENDPOINT")
        .env_remove("TRESTLE_TOKEN")
        .output()
        .expect("run trestle")
}

#[test]
fn help_names_every_command() {
    let help = trestle(&["--help"]);
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for command in [
        "tables",
        "create",
        "drop",
        "get",
        "put",
        "merge",
        "delete",
        "query",
        "count",
        "export",
        "import",
        "copy",
        "completions",
    ] {
        assert!(text.contains(command), "{command} in {text}");
    }
    assert!(text.contains("TRESTLE_ENDPOINT"), "{text}");
}

#[test]
fn completions_are_printed_for_bash() {
    let completions = trestle(&["completions", "bash"]);
    assert!(completions.status.success());
    let script = String::from_utf8_lossy(&completions.stdout);
    assert!(
        script.contains("_trestle()") && script.contains("export"),
        "{script}"
    );
}

#[test]
fn an_unreachable_server_is_an_error_naming_it() {
    // A privileged port nothing listens on.
    let failed = trestle(&["--endpoint", "http://127.0.0.1:1", "tables"]);
    assert_eq!(failed.status.code(), Some(1));
    let message = String::from_utf8_lossy(&failed.stderr);
    assert!(
        message.starts_with("trestle: ") && message.contains("127.0.0.1:1"),
        "{message}"
    );
}

#[test]
fn a_token_may_begin_with_a_hyphen() {
    // An account key is random: one in 64 begins with `-`, which is a value here, not a flag.
    let failed = trestle(&[
        "--endpoint",
        "http://127.0.0.1:1",
        "--token",
        "-6key",
        "tables",
    ]);
    let message = String::from_utf8_lossy(&failed.stderr);
    assert!(
        !message.contains("unexpected argument") && message.contains("127.0.0.1:1"),
        "{message}"
    );
}
