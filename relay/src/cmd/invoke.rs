//! How the binary is invoked: as `relay`, or as the kubectl plugin `kubectl-strata`
//! (`kubectl strata ARGS` runs it with ARGS), and the shell completion scripts clap
//! writes for it (`relay completion bash|zsh|fish`).

use super::Cli;

/// The name a kubectl plugin's file has: kubectl runs `kubectl-strata ARGS` for
/// `kubectl strata ARGS`.
pub const KUBECTL_PLUGIN: &str = "kubectl-strata";

impl Cli {
    /// Parses `args` (the first is the program): as `relay`, or as `kubectl strata`
    /// when the program's file is named [`KUBECTL_PLUGIN`] (help and errors then say
    /// `kubectl strata`). Exits on `--help`, `--version` and errors, as clap does.
    pub fn parse_invoked<I, T>(args: I) -> Cli
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let plugin = args
            .first()
            .and_then(|a| std::path::Path::new(a).file_name())
            .is_some_and(|n| n == KUBECTL_PLUGIN);
        let mut command = Cli::command();
        if plugin {
            command = command.name("kubectl strata").bin_name("kubectl strata");
        }
        let matches = command.get_matches_from(args);
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

#[cfg(test)]
mod tests {
    use crate::cmd::{Cli, Command};
    use clap::{CommandFactory, Parser};

    #[test]
    fn completion_scripts_name_the_commands_for_each_shell() {
        for (shell, marker) in [
            ("bash", "complete -F"),
            ("zsh", "#compdef relay"),
            ("fish", "complete -c relay"),
        ] {
            let cli = Cli::try_parse_from(["relay", "completion", shell]).unwrap();
            let Command::Completion { shell } = cli.command else {
                panic!("not the completion command")
            };
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "relay", &mut out);
            let script = String::from_utf8(out).unwrap();
            assert!(script.contains(marker), "{shell}: {script}");
            assert!(
                script.contains("clusters") && script.contains("rollout"),
                "{shell}"
            );
        }
        assert!(Cli::try_parse_from(["relay", "completion", "tcsh"]).is_err());
    }
}
