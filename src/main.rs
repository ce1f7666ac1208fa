//! The `moonin` command: `run` the manager, print a template's `schedule`, `suggest`
//! templates, view the `fleet`, print the `crds` or the `argocd` configuration, print the
//! `version`.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};

/// Moonin: cluster discovery, scheduled scaling and warm sandbox pools, as custom resources.
#[derive(Parser, Debug)]
// A flag given twice takes its last value: the Helm chart's `extraArgs` come after the
// chart's own flags, and override them instead of failing the start.
#[command(name = "moonin", version, about, args_override_self = true)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Pretty, env = "MOONIN_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Pretty,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the manager against the current kubeconfig (or in-cluster config).
    #[command(args_override_self = true)]
    Run(moonin::manager::RunArgs),
    /// Print the next windows of a ScalingTemplate or ClusterScalingTemplate, from a file
    /// or the cluster, in its time zone and in UTC, and whether it is active.
    Schedule(moonin::scaling::schedule::ScheduleArgs),
    /// Propose ScalingTemplates from the replica history discovery keeps of each HPA and
    /// ScaledObject, and flag templates whose windows changed nothing.
    Suggest(moonin::scaling::suggest::cli::SuggestArgs),
    /// One view over many clusters: Moonin's objects read from every kubeconfig context at
    /// once, printed as one table with a CLUSTER column.
    Fleet(moonin::fleet::cli::FleetArgs),
    /// Print every CRD as YAML, or write one file per CRD into a directory.
    Crds {
        /// Write `<plural>.moonin.io.yaml` files here instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Print the Argo CD ConfigMap `argocd-cm` (a Lua health check per kind, and the
    /// ignored differences), or write it and one `health/<Kind>.lua` per kind into a
    /// directory.
    Argocd {
        /// Write `argocd-cm.yaml` and `health/<Kind>.lua` here instead of printing the
        /// ConfigMap.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Print the version.
    Version,
}

fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour codes only for a person at a terminal: a Pod's log, a file or a pipe gets plain
    // text (JSON never has any).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Pretty => builder.init(),
    }
}

fn print_crds(out_dir: Option<PathBuf>) -> anyhow::Result<()> {
    for crd in moonin::api::all_crds() {
        let yaml = moonin::api::crd_yaml(&crd)?;
        match &out_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                let path = dir.join(moonin::api::crd_file_name(&crd));
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            None => print!("---\n{yaml}"),
        }
    }
    Ok(())
}

fn print_argocd(out_dir: Option<PathBuf>) -> anyhow::Result<()> {
    match out_dir {
        Some(dir) => {
            moonin::gitops::argocd::write(&dir)
                .with_context(|| format!("writing into {}", dir.display()))?;
        }
        None => print!("{}", moonin::gitops::argocd::config_map()),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            init_tracing(cli.log_format);
            moonin::manager::run(args).await
        }
        Command::Schedule(args) => moonin::scaling::schedule::run(args).await,
        Command::Suggest(args) => moonin::scaling::suggest::cli::run(args).await,
        Command::Fleet(args) => moonin::fleet::cli::run(args).await,
        Command::Crds { out_dir } => print_crds(out_dir),
        Command::Argocd { out_dir } => print_argocd(out_dir),
        Command::Version => {
            println!("moonin {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chart appends `extraArgs` after its own flags: the last value of a flag wins.
    #[test]
    fn a_flag_given_twice_takes_its_last_value() {
        let cli = Cli::try_parse_from([
            "moonin",
            "run",
            "--log-format",
            "json",
            "--http-addr",
            "0.0.0.0:8080",
            "--cluster-name",
            "a",
            "--http-addr",
            "[::]:9090",
            "--cluster-name",
            "b",
            "--log-format",
            "pretty",
            "--controllers",
            "scaling",
            "--controllers",
            "sandbox",
        ])
        .expect("parses");
        assert!(matches!(cli.log_format, LogFormat::Pretty));
        let Command::Run(run) = cli.command else {
            panic!("run");
        };
        assert_eq!(run.http_addr.to_string(), "[::]:9090");
        assert_eq!(run.cluster_name, "b");
        assert_eq!(run.controllers, ["scaling", "sandbox"], "a list adds up");
    }
}
