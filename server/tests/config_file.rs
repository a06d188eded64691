//! The configuration file (`--config`) of the built binary: every flag by its long name, beneath
//! the environment and the command line; unknown keys and bad values refused naming the key;
//! `trestle-server config` printing the effective configuration (secrets masked) as a file that
//! configures the same server; and a server started from a file serving as it says.

mod support;

use std::path::Path;
use std::process::Command;

use support::{free_port, http, ServerProcess};

/// `trestle-server config <flags>` with `env` set: its status, stdout and stderr.
fn config(flags: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_trestle-server"))
        .arg("config")
        .args(flags)
        .envs(env.iter().copied())
        .output()
        .expect("run trestle-server config");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The line of `key` in printed configuration `printed`.
fn line<'a>(printed: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key} = ");
    printed
        .lines()
        .find(|line| line.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {key} in {printed}"))
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn flags_beat_the_environment_which_beats_the_file_which_beats_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "trestle.toml",
        r#"
listen = "127.0.0.1:7001"
rest-listen = "127.0.0.1:7002"
max-in-flight = 77
log-level = "debug"
insecure-open = true
oauth-audience = ["https://a", "https://b"]
oauth-issuer = ["https://login.example/tenant/v2.0"]
oauth-jwks = "https://login.example/keys"
store = "postgres://trestle:s3cret@db:5432/trestle?sslmode=disable"
"#,
    );
    let env = [
        ("TRESTLE_LISTEN", "127.0.0.1:7003"),
        ("TRESTLE_LOG", "warn"),
    ];
    let (ok, printed, stderr) = config(&["--config", &file, "--log-level", "error"], &env);
    assert!(ok, "{stderr}");
    assert_eq!(
        line(&printed, "log-level"),
        r#"log-level = "error"  # flag"#
    );
    assert_eq!(
        line(&printed, "listen"),
        r#"listen = "127.0.0.1:7003"  # environment (TRESTLE_LISTEN)"#
    );
    assert_eq!(
        line(&printed, "rest-listen"),
        format!(r#"rest-listen = "127.0.0.1:7002"  # {file}"#)
    );
    assert_eq!(
        line(&printed, "max-in-flight"),
        format!("max-in-flight = 77  # {file}")
    );
    assert_eq!(
        line(&printed, "insecure-open"),
        format!("insecure-open = true  # {file}")
    );
    assert_eq!(
        line(&printed, "oauth-audience"),
        format!(r#"oauth-audience = ["https://a", "https://b"]  # {file}"#)
    );
    assert_eq!(
        line(&printed, "max-connections"),
        "max-connections = 4096  # default"
    );
    // The store's password never shows.
    assert!(!printed.contains("s3cret"), "{printed}");
    assert!(
        line(&printed, "store").contains("trestle:****@db:5432"),
        "{printed}"
    );
}

#[test]
fn what_config_prints_configures_the_same_server() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "first.toml",
        "rest-listen = \"127.0.0.1:7002\"\nmax-in-flight = 77\noauth-audience = [\"x\"]\n\
         oauth-issuer = [\"https://i\"]\noauth-jwks = \"https://idp/keys\"\n",
    );
    let (ok, first, stderr) = config(&["--config", &file], &[]);
    assert!(ok, "{stderr}");
    let again = write(dir.path(), "again.toml", &first);
    let (ok, second, stderr) = config(&["--config", &again], &[]);
    assert!(ok, "{stderr}");
    let values = |printed: &str| -> Vec<String> {
        printed
            .lines()
            .filter(|line| !line.starts_with('#'))
            .map(|line| line.split("  # ").next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(values(&first), values(&second));
}

#[test]
fn unknown_keys_and_bad_values_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |text: &str| {
        let file = write(dir.path(), "bad.toml", text);
        let (ok, _, stderr) = config(&["--config", &file], &[]);
        assert!(!ok, "{text} was taken");
        assert!(stderr.contains(&file), "{stderr}");
        stderr
    };
    assert!(refused("lisen = \"127.0.0.1:1\"\n").contains("unknown key `lisen`"));
    assert!(refused("max_in_flight = 3\n").contains("unknown key `max_in_flight`"));
    assert!(refused("config = \"other.toml\"\n").contains("unknown key `config`"));
    let error = refused("listen = \"nowhere\"\n");
    assert!(
        error.contains("`listen`") && error.contains("nowhere"),
        "{error}"
    );
    let error = refused("max-in-flight = 0\n");
    assert!(error.contains("`max-in-flight`"), "{error}");
    assert!(refused("listen = [\"127.0.0.1:1\"]\n").contains("takes one value"));
    assert!(refused("insecure-open = \"yes\"\n").contains("true or false"));
    assert!(refused("[listen]\nport = 1\n").contains("`listen` is a table"));
    assert!(refused("listen = \n").contains("not TOML"));
    // Flags that need each other are checked wherever their values came from.
    let file = write(dir.path(), "alone.toml", "oauth-jwks = \"keys.json\"\n");
    let (ok, _, stderr) = config(&["--config", &file], &[]);
    assert!(
        !ok && stderr.contains("--oauth-jwks needs --oauth-issuer"),
        "{stderr}"
    );
    let (ok, _, stderr) = config(&["--config", "/nonexistent/trestle.toml"], &[]);
    assert!(
        !ok && stderr.contains("/nonexistent/trestle.toml"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_from_a_file_serves_as_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let health = free_port();
    let file = write(
        dir.path(),
        "trestle.toml",
        &format!("health-listen = \"{health}\"\nmax-in-flight = 8\n"),
    );
    let _server = ServerProcess::start_with(&dir.path().join("data"), &["--config", &file]);
    let answer = http(
        &health,
        "GET /healthz HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
