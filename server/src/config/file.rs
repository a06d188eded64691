//! The configuration file (`--config trestle.toml`, or `TRESTLE_CONFIG`): every serve flag by its
//! long name (`rest-listen = "127.0.0.1:10002"`, `oauth-issuer = ["…"]`, `insecure-open = true`),
//! beneath the command line and the environment: flags > environment > file > defaults. The
//! file's values become the flags' defaults, each checked by the flag's own parser first; a key
//! that names no flag is refused, naming the key. [`Effective`] is what `trestle-server config`
//! prints: every flag's value and where it came from, secrets masked.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches};

use super::Args;

/// The flag naming the file.
const CONFIG_FLAG: &str = "config";
/// The largest file read.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Why the command line, with its configuration file, could not be read.
#[derive(Debug)]
pub enum ParseError {
    /// The command line itself (clap prints it, with usage, and exits).
    Flags(clap::Error),
    /// The configuration file.
    File(FileError),
}

/// What is wrong with the configuration file.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {why}")]
pub struct FileError {
    file: String,
    why: String,
}

/// The parsed command line, and what its values came from.
#[derive(Debug)]
pub struct Effective {
    matches: ArgMatches,
    command: clap::Command,
    from_file: BTreeSet<String>,
    file: Option<PathBuf>,
}

/// Parses `argv` (the program's name first) with the configuration file it names, if any.
pub fn parse(argv: Vec<OsString>) -> Result<(Args, Effective), ParseError> {
    let mut command = Args::command();
    let matches = command
        .clone()
        .try_get_matches_from(&argv)
        .map_err(ParseError::Flags)?;
    let file = matches.get_one::<PathBuf>(CONFIG_FLAG).cloned();
    let mut from_file = BTreeSet::new();
    let matches = match &file {
        None => matches,
        Some(path) => {
            for (flag, values) in read(path).map_err(ParseError::File)? {
                let id = check(&command, path, &flag, &values).map_err(ParseError::File)?;
                command = command.mut_arg(id, |arg| arg.default_values(values.values));
                from_file.insert(flag);
            }
            command
                .clone()
                .try_get_matches_from(&argv)
                .map_err(ParseError::Flags)?
        }
    };
    let args = Args::from_arg_matches(&matches).map_err(ParseError::Flags)?;
    let effective = Effective {
        matches,
        command,
        from_file,
        file,
    };
    Ok((args, effective))
}

/// A key's values as flag arguments, and whether the file gave them as an array.
struct Values {
    values: Vec<String>,
    array: bool,
}

/// The file's keys and their values.
fn read(path: &Path) -> Result<Vec<(String, Values)>, FileError> {
    let failed = |why: String| FileError {
        file: path.display().to_string(),
        why,
    };
    let size = std::fs::metadata(path)
        .map_err(|e| failed(e.to_string()))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(failed(format!("is over {MAX_FILE_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    let table: serde_json::Map<String, serde_json::Value> =
        basic_toml::from_str(&text).map_err(|e| failed(format!("not TOML: {e}")))?;
    let scalar = |key: &str, value: &serde_json::Value| match value {
        serde_json::Value::String(text) => Ok(text.clone()),
        serde_json::Value::Number(number) => Ok(number.to_string()),
        serde_json::Value::Bool(flag) => Ok(flag.to_string()),
        _ => Err(failed(format!(
            "`{key}` is a table or a nested array; a flag's value is a string, a number, a \
             boolean or an array of them"
        ))),
    };
    table
        .iter()
        .map(|(key, value)| {
            let values = match value {
                serde_json::Value::Array(items) => Values {
                    values: items
                        .iter()
                        .map(|item| scalar(key, item))
                        .collect::<Result<_, _>>()?,
                    array: true,
                },
                value => Values {
                    values: vec![scalar(key, value)?],
                    array: false,
                },
            };
            Ok((key.clone(), values))
        })
        .collect()
}

/// Checks `values` of key `flag` as the flag's own parser would take them from the command line;
/// the flag's id.
fn check(
    command: &clap::Command,
    path: &Path,
    flag: &str,
    given: &Values,
) -> Result<String, FileError> {
    let values = &given.values;
    let failed = |why: String| FileError {
        file: path.display().to_string(),
        why,
    };
    let arg = command
        .get_arguments()
        .find(|arg| arg.get_long() == Some(flag) && arg.get_id() != CONFIG_FLAG)
        .filter(|arg| !matches!(arg.get_action(), ArgAction::Help | ArgAction::Version))
        .ok_or_else(|| {
            failed(format!(
                "unknown key `{flag}`: keys are the server's flags without their dashes \
                 (`trestle-server --help`)"
            ))
        })?;
    let repeatable = matches!(arg.get_action(), ArgAction::Append);
    if (given.array || values.len() != 1) && !repeatable {
        return Err(failed(format!("`{flag}` takes one value, not an array")));
    }
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        return match values[0].as_str() {
            "true" | "false" => Ok(arg.get_id().to_string()),
            _ => Err(failed(format!("`{flag}` is true or false"))),
        };
    }
    // The flag alone in a command of its own, given each value as on a command line.
    let alone = clap::Command::new("trestle-server").arg(arg.clone().env(None::<&str>));
    for value in values {
        let argv = [
            "trestle-server".to_owned(),
            format!("--{flag}"),
            value.clone(),
        ];
        alone.clone().try_get_matches_from(argv).map_err(|error| {
            let error = error.to_string();
            let error = error.lines().next().unwrap_or_default();
            failed(format!("`{flag}`: {}", error.trim_start_matches("error: ")))
        })?;
    }
    Ok(arg.get_id().to_string())
}

impl Effective {
    /// Every serve flag with a value, as a configuration file would give it (a file this prints
    /// configures the same server), each with where its value came from; secrets masked.
    pub fn to_toml(&self) -> String {
        let mut text = String::from(
            "# trestle-server's effective configuration (flags > environment > file > defaults)\n",
        );
        let file = self.file.as_ref().map(|path| path.display().to_string());
        let mut args: Vec<_> = self.command.get_arguments().collect();
        args.sort_by_key(|arg| arg.get_long());
        for arg in args {
            let (Some(flag), id) = (arg.get_long(), arg.get_id().as_str()) else {
                continue;
            };
            if id == CONFIG_FLAG || matches!(arg.get_action(), ArgAction::Help | ArgAction::Version)
            {
                continue;
            }
            let Some(raw) = self.matches.get_raw(id) else {
                continue;
            };
            let values: Vec<String> = raw
                .map(|value| mask(flag, &value.to_string_lossy()))
                .map(|value| toml_value(&value))
                .collect();
            let value = match matches!(arg.get_action(), ArgAction::Append) {
                true => format!("[{}]", values.join(", ")),
                false => values.concat(),
            };
            let source = match self.matches.value_source(id) {
                Some(ValueSource::CommandLine) => "flag".to_owned(),
                Some(ValueSource::EnvVariable) => format!(
                    "environment ({})",
                    arg.get_env()
                        .map(OsStr::to_string_lossy)
                        .unwrap_or_default()
                ),
                Some(ValueSource::DefaultValue) if self.from_file.contains(flag) => {
                    file.clone().unwrap_or_default()
                }
                _ => "default".to_owned(),
            };
            text.push_str(&format!("{flag} = {value}  # {source}\n"));
        }
        text
    }
}

/// `value` as TOML: a number or a boolean bare, anything else a string.
fn toml_value(value: &str) -> String {
    let bare = value == "true" || value == "false" || value.parse::<i64>().is_ok();
    match bare {
        true => value.to_owned(),
        false => serde_json::Value::String(value.to_owned()).to_string(),
    }
}

/// `value` of `flag` with any password in it replaced by `****`: a database URL's
/// (`postgres://user:secret@host`, `password=secret`).
fn mask(flag: &str, value: &str) -> String {
    if flag != "store" {
        return value.to_owned();
    }
    let mut masked = value.to_owned();
    if let Some((scheme, rest)) = value.split_once("://") {
        if let Some((credentials, host)) = rest.split_once('@') {
            if let Some((user, _)) = credentials.split_once(':') {
                masked = format!("{scheme}://{user}:****@{host}");
            }
        }
    }
    let parts: Vec<String> = masked
        .split_inclusive(['?', '&', ' '])
        .map(|part| match part.strip_prefix("password=") {
            Some(rest) => {
                let end = rest.find(['&', ' ']).unwrap_or(rest.len());
                format!("password=****{}", &rest[end..])
            }
            None => part.to_owned(),
        })
        .collect();
    parts.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_a_store_url_are_masked() {
        assert_eq!(
            mask(
                "store",
                "postgres://trestle:s3cret@db:5432/trestle?sslmode=require"
            ),
            "postgres://trestle:****@db:5432/trestle?sslmode=require"
        );
        assert_eq!(
            mask("store", "postgres://db/t?password=s3cret&sslmode=require"),
            "postgres://db/t?password=****&sslmode=require"
        );
        assert_eq!(
            mask("store", "host=db password=s3cret user=t"),
            "host=db password=**** user=t"
        );
        assert_eq!(mask("listen", "a:b@c"), "a:b@c");
    }

    #[test]
    fn values_print_as_toml_reads_them() {
        assert_eq!(toml_value("1024"), "1024");
        assert_eq!(toml_value("true"), "true");
        assert_eq!(toml_value("127.0.0.1:1"), "\"127.0.0.1:1\"");
        assert_eq!(toml_value("a\"b"), "\"a\\\"b\"");
    }
}
