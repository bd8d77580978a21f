//! `berm completions SHELL`: the completion script for a shell, generated from the same clap
//! definition the parser uses, so it cannot list a flag berm does not take.

use crate::Exit;

/// `berm completions` arguments.
#[derive(clap::Args)]
#[command(after_help = "Install, e.g.:
  bash: berm completions bash > ~/.local/share/bash-completion/completions/berm
  zsh:  berm completions zsh > \"${fpath[1]}/_berm\"
  fish: berm completions fish > ~/.config/fish/completions/berm.fish")]
pub struct Args {
    /// The shell to write the script for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Writes the script for `C`, berm's whole command line, to stdout.
pub fn run<C: clap::CommandFactory>(args: Args) -> anyhow::Result<Exit> {
    let mut command = C::command();
    // Generated into memory first: clap_complete panics on a failed write.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "berm", &mut script);
    crate::out::write_bytes(&script);
    Ok(Exit::Ok)
}
