//! `berm secret set|ls|rm`: a program's secret values, kept by bermd
//! (`$BERM_HOME/secrets/<program>/<NAME>`, mode 0600) and never printed.
//! A deployment binds a secret to hosts with `--secret NAME=HOST`; the
//! program writes `{{secret:NAME}}` where the value goes.

use std::io::Read;
use std::path::Path;

use anyhow::Context;
use berm_control::SecretValue;

use crate::Exit;

/// `berm secret …`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Set a secret from stdin (one trailing newline is dropped), e.g.
    /// `berm secret set issues GITHUB_TOKEN < token.txt`.
    Set {
        /// The program that uses it.
        program: String,
        /// The secret's name, as in `{{secret:NAME}}`.
        name: String,
    },
    /// List the names of a program's secrets (never their values).
    Ls {
        /// The program.
        program: String,
    },
    /// Remove a secret.
    Rm {
        /// The program.
        program: String,
        /// The secret's name.
        name: String,
    },
}

/// Runs `berm secret …`.
pub async fn run(home: &Path, command: Command) -> anyhow::Result<Exit> {
    let client = super::client(home);
    let list = match command {
        Command::Set { program, name } => {
            let mut value = String::new();
            std::io::stdin()
                .take(64 << 10)
                .read_to_string(&mut value)
                .context("reading the secret's value from stdin (it must be UTF-8 text)")?;
            let value = value
                .strip_suffix('\n')
                .map(|v| v.strip_suffix('\r').unwrap_or(v))
                .unwrap_or(&value)
                .to_string();
            client
                .set_secret(&program, &name, &SecretValue { value })
                .await?;
            crate::outln!("set secret {name} of {program}");
            return Ok(Exit::Ok);
        }
        Command::Ls { program } => client.secrets(&program).await?,
        Command::Rm { program, name } => {
            client.remove_secret(&program, &name).await?;
            crate::outln!("removed secret {name} of {program}");
            return Ok(Exit::Ok);
        }
    };
    for name in list.names {
        crate::outln!("{name}");
    }
    Ok(Exit::Ok)
}
