//! The servers a run talks to, and the faults it does them: `trestle-server` processes on fixed
//! loopback ports (a server killed comes back on its own port, so clients' channels reconnect),
//! over the embedded store or one PostgreSQL database shared by two servers; SIGKILL of a server,
//! and an immediate stop of PostgreSQL.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use trestle_proto::pb;

use super::postgres_cluster::Postgres;
use super::rng::Rng;
use super::support::{free_port, ServerProcess};

/// A client of one server: calls time out, so a call to a server that is down fails soon.
pub(crate) type Client = pb::table_service_client::TableServiceClient<tonic::transport::Channel>;

/// The servers' addresses and a channel to each.
#[derive(Clone)]
pub(crate) struct Servers {
    channels: Vec<tonic::transport::Channel>,
}

impl Servers {
    fn over(addrs: &[String]) -> Servers {
        let channels = addrs
            .iter()
            .map(|addr| {
                tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                    .expect("endpoint")
                    .connect_timeout(Duration::from_secs(1))
                    .timeout(Duration::from_secs(5))
                    .connect_lazy()
            })
            .collect();
        Servers { channels }
    }

    /// A client of one of the servers, chosen by `rng`.
    pub(crate) fn pick(&self, rng: &mut Rng) -> Client {
        Client::new(self.channels[rng.below(self.channels.len())].clone())
            .max_decoding_message_size(64 << 20)
    }

    /// A client of each server.
    pub(crate) fn each(&self) -> Vec<Client> {
        self.channels.iter().cloned().map(Client::new).collect()
    }
}

/// The store under test and the processes serving it.
pub(crate) struct System {
    pub(crate) servers: Servers,
    processes: Arc<Mutex<Vec<Option<ServerProcess>>>>,
    starts: Vec<(PathBuf, Vec<String>)>,
    postgres: Option<Postgres>,
    _dir: tempfile::TempDir,
}

impl System {
    /// One server over the embedded store.
    pub(crate) fn sled() -> System {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        System::start(dir, None, vec![(data, Vec::new())])
    }

    /// Two servers over one PostgreSQL database, or `None` where PostgreSQL is not installed
    /// (unless `TRESTLE_REQUIRE_POSTGRES` is set).
    pub(crate) fn postgres() -> Option<System> {
        let cluster = Postgres::start()?;
        let url = cluster.database("checked");
        let dir = tempfile::tempdir().unwrap();
        let starts = (0..2)
            .map(|n| {
                let data = dir.path().join(format!("unused-{n}"));
                (data, vec!["--store".to_owned(), url.clone()])
            })
            .collect();
        Some(System::start(dir, Some(cluster), starts))
    }

    fn start(
        dir: tempfile::TempDir,
        postgres: Option<Postgres>,
        mut starts: Vec<(PathBuf, Vec<String>)>,
    ) -> System {
        let mut addrs = Vec::new();
        for (_, args) in &mut starts {
            let addr = free_port();
            args.extend(["--listen".to_owned(), addr.clone()]);
            // So that the final aggregate goes through its continuation tokens.
            args.extend(["--aggregate-examined-per-call".to_owned(), "7".to_owned()]);
            addrs.push(addr);
        }
        let processes = starts
            .iter()
            .map(|(data, args)| Some(start_process(data, args)))
            .collect();
        System {
            servers: Servers::over(&addrs),
            processes: Arc::new(Mutex::new(processes)),
            starts,
            postgres,
            _dir: dir,
        }
    }

    /// How many servers there are.
    pub(crate) fn server_count(&self) -> usize {
        self.starts.len()
    }

    /// SIGKILLs server `n` and starts it again after `down` (blocking: call off the runtime).
    pub(crate) fn kill_and_restart(&self, n: usize, down: Duration) {
        let killed = self.processes.lock().unwrap()[n].take();
        killed.expect("a server running").kill_9();
        std::thread::sleep(down);
        let (data, args) = &self.starts[n];
        let started = start_process(data, args);
        self.processes.lock().unwrap()[n] = Some(started);
    }

    /// Stops PostgreSQL at once (as a crash would) and starts it again after `down`, if the
    /// store is PostgreSQL; whether it was.
    pub(crate) fn crash_database(&self, down: Duration) -> bool {
        let Some(cluster) = &self.postgres else {
            return false;
        };
        cluster.kill();
        std::thread::sleep(down);
        cluster.restart();
        true
    }
}

fn start_process(data: &std::path::Path, args: &[String]) -> ServerProcess {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServerProcess::start_with(data, &args)
}
