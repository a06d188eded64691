//! A throwaway PostgreSQL cluster for the tests of the PostgreSQL store (shared by the server's
//! tests and the end-to-end ones).
#![allow(dead_code, unreachable_pub)]

/// A throwaway PostgreSQL cluster in a temporary directory, on a free loopback port, stopped
/// (immediately) when dropped. As root, its programs run as the `postgres` user.
pub struct Postgres {
    dir: tempfile::TempDir,
    port: u16,
}

impl Postgres {
    /// Starts a cluster, or `None` (said on stderr) where PostgreSQL is not installed, unless
    /// `TRESTLE_REQUIRE_POSTGRES` is set (as CI sets it): then its absence fails the test.
    pub fn start() -> Option<Postgres> {
        if std::process::Command::new("initdb")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("TRESTLE_REQUIRE_POSTGRES").is_none(),
                "PostgreSQL's initdb is not on PATH"
            );
            eprintln!("skipping: PostgreSQL's initdb is not on PATH");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let as_root = rustix_is_root();
        if as_root {
            std::process::Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let data = dir.path().join("data");
        run(
            as_root,
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "trestle",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        );
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -k {} -c fsync=on",
            dir.path().display()
        );
        run(
            as_root,
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &options,
                "-w",
                "-l",
                dir.path().join("log").to_str().unwrap(),
                "start",
            ],
        );
        Some(Postgres { dir, port })
    }

    /// The connection string of a new database of its own.
    pub fn database(&self, name: &str) -> String {
        let admin = format!(
            "host=127.0.0.1 port={} user=trestle dbname=postgres",
            self.port
        );
        let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        format!(
            "host=127.0.0.1 port={} user=trestle dbname={name}",
            self.port
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        run(
            rustix_is_root(),
            "pg_ctl",
            &["-D", data.to_str().unwrap(), "-m", "immediate", "stop"],
        );
    }
}

fn rustix_is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"))
}

/// Runs a PostgreSQL program (as `postgres` when root), asserting it succeeds.
fn run(as_root: bool, program: &str, args: &[&str]) {
    let mut command = if as_root {
        let mut command = std::process::Command::new("runuser");
        command.args(["-u", "postgres", "--", program]);
        command
    } else {
        std::process::Command::new(program)
    };
    let output = command.args(args).output().expect(program);
    assert!(
        output.status.success(),
        "{program} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
