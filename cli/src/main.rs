//! `trestle`: the command line of Trestle (see the crate's library for what each command does).

use std::process::ExitCode;

use clap::Parser;
use trestle_cli::{run, Cli};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut input = std::io::stdin().lock();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let result = run(cli, &mut input, &mut out).await;
    let flushed = std::io::Write::flush(&mut out);
    match result.and(flushed.map_err(Into::into)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("trestle: {error}");
            ExitCode::FAILURE
        }
    }
}
