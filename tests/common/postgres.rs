//! A throwaway PostgreSQL cluster for the tests of the PostgreSQL store (shared by the server's
//! tests and the end-to-end ones).
#![allow(dead_code, unreachable_pub)]

/// The database the end-to-end tests keep their servers' stores in: with
/// `TRESTLE_TEST_STORE=postgres`, a fresh database of one cluster shared by the test process
/// (started on first use, stopped by a watchdog when the process ends); `None` (sled) otherwise.
/// The same tests, the same assertions, either store.
pub fn conformance_database() -> Option<String> {
    if !conformance_database_in_use() {
        return None;
    }
    static CLUSTER: std::sync::OnceLock<Postgres> = std::sync::OnceLock::new();
    static DATABASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let cluster = CLUSTER.get_or_init(|| {
        let cluster =
            Postgres::start_with(&["-c", "max_connections=400", "-c", "track_functions=pl"])
                .expect("TRESTLE_TEST_STORE=postgres needs PostgreSQL's programs on PATH");
        cluster.stop_when_this_process_ends();
        cluster
    });
    let n = DATABASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(cluster.database(&format!("conformance_{n}")))
}

/// Whether the end-to-end tests keep their servers' stores in PostgreSQL
/// (`TRESTLE_TEST_STORE=postgres`) rather than sled.
pub fn conformance_database_in_use() -> bool {
    match std::env::var("TRESTLE_TEST_STORE").as_deref() {
        Err(_) | Ok("" | "sled") => false,
        Ok("postgres") => true,
        Ok(other) => panic!("TRESTLE_TEST_STORE={other:?}: the stores are sled and postgres"),
    }
}

/// A throwaway PostgreSQL cluster in a temporary directory, on a free loopback port, stopped
/// (immediately) when dropped. As root, its programs run as the `postgres` user.
pub struct Postgres {
    dir: tempfile::TempDir,
    port: u16,
    /// The server's options: its port, address and socket directory, and any settings.
    options: String,
}

impl Postgres {
    /// Starts a cluster, or `None` (said on stderr) where PostgreSQL is not installed, unless
    /// `TRESTLE_REQUIRE_POSTGRES` is set (as CI sets it): then its absence fails the test.
    pub fn start() -> Option<Postgres> {
        Postgres::start_with(&[])
    }

    /// Starts a cluster with extra `postgres` options (`-c name=value` pairs).
    pub fn start_with(settings: &[&str]) -> Option<Postgres> {
        if std::process::Command::new("initdb")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("TRESTLE_REQUIRE_POSTGRES").is_none(),
                "PostgreSQL's initdb is not on PATH"
            );
            // Straight to standard error: the harness would swallow an `eprintln!`.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"SKIPPED a PostgreSQL test: PostgreSQL's initdb is not on PATH\n",
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let as_root = rustix_is_root();
        hand_to_postgres(dir.path());
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
            "-p {port} -c listen_addresses=127.0.0.1 -k {} {}",
            dir.path().display(),
            settings.join(" ")
        );
        let cluster = Postgres { dir, port, options };
        cluster.restart();
        Some(cluster)
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

impl Postgres {
    /// The cluster's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the cluster at once, as a crash would (`pg_ctl stop -m immediate`).
    pub fn kill(&self) {
        pg_ctl(&self.data(), &["-m", "immediate", "stop"]);
    }

    /// Starts the (stopped) cluster, on its port.
    pub fn restart(&self) {
        let log = self.dir.path().join("log");
        pg_ctl(
            &self.data(),
            &[
                "-o",
                &self.options,
                "-w",
                "-l",
                log.to_str().unwrap(),
                "start",
            ],
        );
    }

    fn data(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    /// For a cluster kept in a static (never dropped): a watchdog process stops it and removes
    /// its directory once this process has ended, however it ends.
    // The watchdog outlives this process by design: nobody waits for it.
    #[allow(clippy::zombie_processes)]
    fn stop_when_this_process_ends(&self) {
        let stop = if rustix_is_root() {
            "runuser -u postgres -- pg_ctl"
        } else {
            "pg_ctl"
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} -D '{data}' -m immediate stop; rm -rf '{dir}'",
            pid = std::process::id(),
            data = self.data().display(),
            dir = self.dir.path().display(),
        );
        std::process::Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the cluster's watchdog");
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data();
        if data.join("postmaster.pid").exists() {
            pg_ctl(&data, &["-m", "immediate", "stop"]);
        }
    }
}

/// Gives `path` (and what it holds) to the `postgres` user when running as root, so that a
/// cluster (run as `postgres`) can read files a test wrote there.
pub fn hand_to_postgres(path: &std::path::Path) {
    if rustix_is_root() {
        std::process::Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(path)
            .status()
            .unwrap();
    }
}

fn rustix_is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"))
}

/// Runs `pg_ctl -D data ...`.
fn pg_ctl(data: &std::path::Path, args: &[&str]) {
    let mut all = vec!["-D", data.to_str().unwrap()];
    all.extend_from_slice(args);
    run(rustix_is_root(), "pg_ctl", &all);
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
