//! The documentation says what the code does. Every `relay …` and `agent …` command that
//! README.md and the Markdown files under deploy/ show, in code blocks or inline, and the
//! systemd units' `ExecStart=`, parses with the binaries' own command lines (clap); every
//! relay or agent configuration and topology their YAML blocks show loads with the
//! binaries' own loaders, unknown fields refused. A failure names the file, the line and
//! the parser's error.
//!
//! The same mechanism as the configuration reference's tests (`deploy/CONFIG.md`, in
//! `relay/src/config.rs`, `relay/src/cmd/topology.rs` and `agent/src/config.rs`, which
//! also check that its tables name every field): the blocks are read with
//! [`strata_node::config::fenced_blocks`] and given to the real parsers. Both binaries'
//! command lines are reachable here, the relay's as a dev-dependency.

use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches};
use serde_json::Value;
use strata_node::config::fenced_blocks;

/// Which binary a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bin {
    Relay,
    Agent,
}

/// A command the documentation shows: where, and its words after the program's name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Invocation {
    at: String,
    bin: Bin,
    args: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every Markdown file under deploy/, as (path from the root, text).
fn documents() -> Vec<(String, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut dirs = vec![root().join("deploy")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(root()).unwrap().display().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

// ---- Commands ------------------------------------------------------------------------

/// A piece of a shell line.
#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    /// `&&`, `||`, `|`, `;`, `&`: another command follows.
    Separator,
    /// `>`, `>>`, `2>`, `<`: the next word is a file, not an argument (`2>&1`: none).
    Redirect {
        target: bool,
    },
}

/// The words and operators of one shell line, as a reader of the docs takes them:
/// quotes and `$(...)` hold a word together, `<placeholder text>` is one word, a `#` at
/// the start of a word comments out the rest.
fn tokenize(line: &str) -> Vec<Token> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let flush = |word: &mut Option<String>, out: &mut Vec<Token>| {
        if let Some(w) = word.take() {
            out.push(Token::Word(w));
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            c if c.is_whitespace() => flush(&mut word, &mut out),
            '#' if word.is_none() => break,
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                i += 1;
                while i < chars.len() && chars[i] != c {
                    if c == '"' && chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    w.push(chars[i]);
                    i += 1;
                }
            }
            '\\' => {
                if let Some(n) = next {
                    word.get_or_insert_with(String::new).push(n);
                    i += 1;
                }
            }
            '$' if next == Some('(') => {
                let w = word.get_or_insert_with(String::new);
                let mut depth = 0;
                while i < chars.len() {
                    w.push(chars[i]);
                    match chars[i] {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 && chars[i] == ')' {
                        break;
                    }
                    i += 1;
                }
            }
            '<' if next.is_some_and(|n| !n.is_whitespace() && n != '<' && n != '(')
                && chars[i..].contains(&'>') =>
            {
                let w = word.get_or_insert_with(String::new);
                while i < chars.len() {
                    w.push(chars[i]);
                    if chars[i] == '>' {
                        break;
                    }
                    i += 1;
                }
            }
            '<' | '>' => {
                // `2>`: the digit was the redirection's, not a word.
                if word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|d| d.is_ascii_digit()))
                {
                    word = None;
                }
                flush(&mut word, &mut out);
                while chars.get(i + 1).is_some_and(|&n| n == '>' || n == '<') {
                    i += 1;
                }
                let to_fd = chars.get(i + 1) == Some(&'&');
                if to_fd {
                    i += 1;
                    while chars
                        .get(i + 1)
                        .is_some_and(|n| n.is_ascii_digit() || *n == '-')
                    {
                        i += 1;
                    }
                }
                out.push(Token::Redirect { target: !to_fd });
            }
            '&' if next == Some('>') => {
                flush(&mut word, &mut out);
                i += 1;
                out.push(Token::Redirect { target: true });
            }
            '&' | '|' | ';' => {
                flush(&mut word, &mut out);
                if next == Some(c) {
                    i += 1;
                }
                out.push(Token::Separator);
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
        i += 1;
    }
    flush(&mut word, &mut out);
    out
}

/// The `relay` and `agent` commands of one shell line: each command of a pipe or list,
/// past `VAR=value` assignments and redirections, whose program is `relay` or `agent`
/// (any path to them, such as `target/release/relay`) or `cargo run ... --bin relay --`.
fn commands_in(line: &str) -> Vec<(Bin, Vec<String>)> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut tokens = tokenize(line).into_iter().peekable();
    loop {
        match tokens.next() {
            Some(Token::Word(w)) => words.push(w),
            Some(Token::Redirect { target }) => {
                if target && matches!(tokens.peek(), Some(Token::Word(_))) {
                    tokens.next();
                }
            }
            end @ (Some(Token::Separator) | None) => {
                commands.extend(command(&words));
                words.clear();
                if end.is_none() {
                    return commands;
                }
            }
        }
    }
}

/// The binary and arguments `words` (one simple command) run, if one of ours.
fn command(words: &[String]) -> Option<(Bin, Vec<String>)> {
    let is_assignment = |w: &String| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let words: Vec<&String> = words
        .iter()
        .skip_while(|w| is_assignment(w) || ["sudo", "env", "exec"].contains(&w.as_str()))
        .collect();
    let (program, rest) = words.split_first()?;
    let rest: Vec<String> = rest.iter().map(|w| w.to_string()).collect();
    match program.rsplit('/').next() {
        Some("relay") => return Some((Bin::Relay, rest)),
        Some("agent") => return Some((Bin::Agent, rest)),
        _ => {}
    }
    // cargo run [--release] (--bin relay | -p strata-relay) -- ARGS
    if program.as_str() != "cargo" || rest.first().map(String::as_str) != Some("run") {
        return None;
    }
    let dashes = rest.iter().position(|w| w == "--").unwrap_or(rest.len());
    let options = &rest[..dashes];
    let value = |flags: &[&str]| {
        options.iter().enumerate().find_map(|(i, w)| {
            flags.iter().find_map(|f| match w.strip_prefix(*f) {
                Some("") => options.get(i + 1).cloned(),
                Some(v) => v.strip_prefix('=').map(str::to_owned),
                None => None,
            })
        })
    };
    let bin = value(&["--bin"]);
    let package = value(&["-p", "--package"]);
    let named = match (bin.as_deref(), package.as_deref()) {
        (Some("relay"), _) | (None, Some("strata-relay")) => Bin::Relay,
        (Some("agent"), _) | (None, Some("strata-agent")) => Bin::Agent,
        _ => return None,
    };
    Some((named, rest.get(dashes + 1..).unwrap_or_default().to_vec()))
}

/// The logical lines of a shell block (continuations joined), each with its first line's
/// number; in a block that shows prompts (`$ `), only the prompted lines.
fn shell_lines(text: &str, first: usize) -> Vec<(usize, String)> {
    let prompted = text.lines().any(|l| l.trim_start().starts_with("$ "));
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        let (n, joined) = match open.take() {
            Some((n, so_far)) => (n, format!("{so_far} {line}")),
            None => match line.strip_prefix("$ ") {
                Some(command) => (first + i, command.to_owned()),
                None if !prompted => (first + i, line.to_owned()),
                None => continue,
            },
        };
        match joined.strip_suffix('\\') {
            Some(more) => open = Some((n, more.trim_end().to_owned())),
            None => out.push((n, joined)),
        }
    }
    out.extend(open);
    out
}

/// The inline code spans (`` `...` ``) of `doc` outside fenced blocks, each with the
/// line it starts on; a span broken over lines is joined with spaces.
fn inline_spans(doc: &str) -> Vec<(usize, String)> {
    let blocks = fenced_blocks(doc);
    let in_block = |n: usize| blocks.iter().any(|b| n + 1 >= b.line && n <= b.end);
    let prose: String = doc
        .lines()
        .enumerate()
        .map(|(i, l)| if in_block(i + 1) { "" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    let mut spans = Vec::new();
    let mut rest = prose.as_str();
    let mut line = 1;
    while let Some(open) = rest.find('`') {
        line += rest[..open].matches('\n').count();
        let ticks = rest[open..].len() - rest[open..].trim_start_matches('`').len();
        let body = &rest[open + ticks..];
        let fence = "`".repeat(ticks);
        let Some(close) = body.find(&fence) else {
            break;
        };
        let span = body[..close]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        spans.push((line, span));
        line += body[..close].matches('\n').count();
        rest = &body[close + ticks..];
    }
    spans
}

/// What the documents show of the binaries' command lines.
#[derive(Debug, Default)]
struct Shown {
    /// Commands in fenced shell blocks and the units' `ExecStart=`: meant to be run as
    /// written, so parsed strictly.
    run: Vec<Invocation>,
    /// Inline commands: `relay topology certs` names the command (its required
    /// arguments are elsewhere), so only what is given must parse.
    named: Vec<Invocation>,
    /// Inline synopses (`relay get KIND [NAME] [-n NS | -A]`, `relay
    /// cordon|uncordon|drain`): each option must be one of the commands named.
    synopses: Vec<Invocation>,
}

fn shown_commands() -> Shown {
    let mut shown = Shown::default();
    for (file, text) in documents() {
        for block in fenced_blocks(&text) {
            if !["", "sh", "bash", "shell", "console", "text"].contains(&block.lang.as_str()) {
                continue;
            }
            for (n, line) in shell_lines(&block.text, block.line) {
                for (bin, args) in commands_in(&line) {
                    let at = format!("{file}:{n}");
                    shown.run.push(Invocation { at, bin, args });
                }
            }
        }
        for (n, span) in inline_spans(&text) {
            let at = format!("{file}:{n}");
            let mut words = span.split_whitespace().map(str::to_owned);
            let bin = match words.next().as_deref() {
                Some("relay") => Bin::Relay,
                Some("agent") => Bin::Agent,
                _ => continue,
            };
            if span.contains(['[', '|', '…']) || span.contains("...") {
                let args = words.collect();
                shown.synopses.push(Invocation { at, bin, args });
                continue;
            }
            for (bin, args) in commands_in(&span) {
                // The program's name alone names the binary, not a command.
                if !args.is_empty() {
                    let at = at.clone();
                    shown.named.push(Invocation { at, bin, args });
                }
            }
        }
    }
    for unit in ["strata-relay.service", "strata-agent.service"] {
        let path = format!("deploy/systemd/{unit}");
        let text = std::fs::read_to_string(root().join(&path)).unwrap();
        for (i, line) in text.lines().enumerate() {
            if let Some(exec) = line.strip_prefix("ExecStart=") {
                for (bin, args) in commands_in(exec) {
                    let at = format!("{path}:{}", i + 1);
                    shown.run.push(Invocation { at, bin, args });
                }
            }
        }
    }
    shown
}

/// The binary's command line as clap defines it.
fn definition(bin: Bin) -> clap::Command {
    let mut cmd = match bin {
        Bin::Relay => strata_relay::cmd::Cli::command(),
        Bin::Agent => strata_agent::cli::Cli::command(),
    };
    // Global options (`--log`) reach the subcommands.
    cmd.build();
    cmd
}

/// `args` with every option the command may take from the environment (`STRATA_CA`,
/// `STRATA_TOKEN`, `STRATA_TOKENS`) and that it does not give taken as set there, as
/// clap would read it: the docs export them once (or `relay up` prints the exports) and
/// then leave them out.
fn with_environment(bin: Bin, args: &[String]) -> Vec<String> {
    let top = definition(bin);
    let mut command = &top;
    let mut after = 0;
    for (i, word) in args.iter().enumerate() {
        if let Some(sub) = command.find_subcommand(word) {
            command = sub;
            after = i + 1;
        }
    }
    let given = |long: &str, short: Option<char>| {
        args.iter().any(|w| {
            w == &format!("--{long}")
                || w.starts_with(&format!("--{long}="))
                || short.is_some_and(|s| w.starts_with(&format!("-{s}")))
        })
    };
    let from_env = command.get_arguments().filter_map(|a| {
        let long = a.get_long()?;
        // A value every option parses: a file name, a token, and `host:port` for
        // `--server` (which takes a name).
        (a.get_env().is_some() && a.get_default_values().is_empty() && !given(long, a.get_short()))
            .then(|| format!("--{long}=from-the-environment:1"))
    });
    let mut out = args[..after].to_vec();
    out.extend(from_env);
    out.extend_from_slice(&args[after..]);
    out
}

/// Parses `args` with the binary's command line, as the binary does.
fn parse(bin: Bin, args: &[String]) -> Result<(), clap::Error> {
    let name = match bin {
        Bin::Relay => "relay",
        Bin::Agent => "agent",
    };
    let argv = std::iter::once(name.to_owned()).chain(with_environment(bin, args));
    let matches = match definition(bin).try_get_matches_from(argv) {
        Ok(m) => m,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    match bin {
        Bin::Relay => strata_relay::cmd::Cli::from_arg_matches(&matches).map(drop),
        Bin::Agent => strata_agent::cli::Cli::from_arg_matches(&matches).map(drop),
    }
}

/// A synopsis (`relay get KIND [NAME] [-n NS | -A]`, `relay cordon|uncordon|drain`)
/// is no command line; each option it names must be one of the command it names, of
/// one of the alternatives at least.
fn synopsis_fault(bin: Bin, args: &[String]) -> Option<String> {
    let mut commands = vec![definition(bin)];
    for word in args.iter().map(|w| w.trim_matches(['[', ']'])) {
        let next: Vec<clap::Command> = commands
            .iter()
            .flat_map(|c| {
                word.split('|')
                    .filter_map(|alt| c.find_subcommand(alt).cloned())
            })
            .collect();
        if next.is_empty() {
            break;
        }
        commands = next;
    }
    let options: Vec<&str> = args
        .iter()
        .flat_map(|w| w.split('|'))
        .map(|w| w.trim_matches(['[', ']']))
        .filter(|w| w.starts_with('-') && w.len() > 1)
        .collect();
    let known = |c: &clap::Command, option: &str| {
        option == "--help"
            || option == "-h"
            || c.get_arguments().any(|a| match option.strip_prefix("--") {
                Some(long) => a.get_long() == Some(long),
                None => a.get_short().map(String::from).as_deref() == option.get(1..),
            })
    };
    let unknown: Vec<&str> = options
        .into_iter()
        .filter(|o| !commands.iter().any(|c| known(c, o)))
        .collect();
    (!unknown.is_empty()).then(|| {
        let names: Vec<&str> = commands.iter().map(clap::Command::get_name).collect();
        format!("{} names no option {}", names.join("|"), unknown.join(", "))
    })
}

#[test]
fn documented_commands_parse_with_the_binaries_command_lines() {
    let shown = shown_commands();
    let mut faults = Vec::new();
    let mut fault = |c: &Invocation, e: &dyn std::fmt::Display| {
        faults.push(format!("{}: {}: {e}", c.at, c.args.join(" ")));
    };
    for c in &shown.run {
        if let Err(e) = parse(c.bin, &c.args) {
            fault(c, &e.render());
        }
    }
    for c in &shown.named {
        // A trailing option may be named without its value (`relay apply -f`).
        let mut args = c.args.clone();
        if args.last().is_some_and(|a| a.starts_with('-')) {
            args.push("VALUE".to_owned());
        }
        match parse(c.bin, &args) {
            Err(e)
                if !matches!(
                    e.kind(),
                    clap::error::ErrorKind::MissingRequiredArgument
                        | clap::error::ErrorKind::MissingSubcommand
                        | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                ) =>
            {
                fault(c, &e.render());
            }
            _ => {}
        }
    }
    for c in &shown.synopses {
        if let Some(e) = synopsis_fault(c.bin, &c.args) {
            fault(c, &e);
        }
    }
    let relay = |list: &[Invocation]| list.iter().filter(|c| c.bin == Bin::Relay).count();
    eprintln!(
        "commands checked: {} to run, from code blocks and units ({} relay, {} agent); {} named inline; {} synopses",
        shown.run.len(),
        relay(&shown.run),
        shown.run.len() - relay(&shown.run),
        shown.named.len(),
        shown.synopses.len(),
    );
    // The extraction itself must keep finding what the documents show.
    assert!(relay(&shown.run) >= 15, "{:#?}", shown.run);
    assert!(shown.run.len() - relay(&shown.run) >= 2, "{:#?}", shown.run);
    assert!(shown.named.len() >= 40, "{:#?}", shown.named);
    assert!(shown.synopses.len() >= 8, "{:#?}", shown.synopses);
    assert!(faults.is_empty(), "\n{}", faults.join("\n"));
}

// ---- Configurations ------------------------------------------------------------------

/// Documents whose YAML is not a node's configuration: Placements and other Kubernetes
/// objects.
const NOT_NODE_CONFIGURATIONS: &[&str] = &["deploy/PLACEMENTS.md"];

/// What a YAML block of the documents is, and how it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A whole `relay serve` configuration (it has `node:`).
    Relay,
    /// A whole `agent run` configuration (it has `cluster:`).
    Agent,
    /// A whole topology (`kind: Topology`).
    Topology,
    /// Some sections of one of them, checked within a minimal file of each kind: it
    /// must fit at least one.
    Fragment,
}

/// What the minimal files below a fragment are; the fragment's sections replace theirs.
const RELAY_BASE: &str = r#"{ "node": "docs", "listen": "127.0.0.1:7443", "tls": { "cert": "n.crt", "key": "n.key", "ca": "ca.crt" }, "data": "data" }"#;
const AGENT_BASE: &str = r#"{ "cluster": "docs", "parent": { "name": "site", "address": "127.0.0.1:7443" }, "tls": { "cert": "n.crt", "key": "n.key", "ca": "ca.crt" }, "data": "data" }"#;
const TOPOLOGY_BASE: &str = r#"{ "apiVersion": "strata.dev/v1alpha1", "kind": "Topology", "metadata": { "name": "docs" }, "spec": { "root": { "name": "docs" } } }"#;

fn shape(v: &Value) -> Shape {
    if v.get("kind").and_then(Value::as_str) == Some("Topology") {
        Shape::Topology
    } else if v.get("node").is_some() {
        Shape::Relay
    } else if v.get("cluster").is_some() {
        Shape::Agent
    } else {
        Shape::Fragment
    }
}

/// `over` laid on `base`: maps merged key by key, anything else replaced.
fn merged(base: &Value, over: &Value) -> Value {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            let mut out = b.clone();
            for (k, v) in o {
                let next = match b.get(k) {
                    Some(bv) => merged(bv, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), next);
            }
            Value::Object(out)
        }
        (_, o) => o.clone(),
    }
}

fn load_relay(text: &str) -> Result<(), String> {
    load_file(text, |p| {
        strata_relay::config::NodeConfig::load(p)
            .map(drop)
            .map_err(|e| e.to_string())
    })
}

fn load_agent(text: &str) -> Result<(), String> {
    load_file(text, |p| {
        strata_agent::config::AgentConfig::load(p)
            .map(drop)
            .map_err(|e| e.to_string())
    })
}

/// Writes `text` as a config file of its own and loads it with `load`, as the binary
/// would.
fn load_file(
    text: &str,
    load: impl Fn(&std::path::Path) -> Result<(), String>,
) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    load(&path)
}

/// A whole topology is compiled; a fragment's references (a relay's parent) are to
/// nodes it does not show, so it is only read into the raw types (every field known,
/// every value of its type).
fn load_topology(text: &str, whole: bool) -> Result<(), String> {
    if whole {
        strata_topology::parse(text, Path::new("topology.yaml"))
            .map(drop)
            .map_err(|e| e.to_string())
    } else {
        serde_saphyr::from_str::<strata_topology::raw::RawTopology>(text)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// Checks one YAML block; the shape it was taken for, or every parser's refusal.
fn check_yaml(text: &str) -> Result<Shape, String> {
    let value: Value = serde_saphyr::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let s = shape(&value);
    match s {
        Shape::Relay => load_relay(text),
        Shape::Agent => load_agent(text),
        Shape::Topology => load_topology(text, true),
        Shape::Fragment => {
            let within = |base: &str| {
                let base: Value = serde_json::from_str(base).unwrap();
                serde_json::to_string(&merged(&base, &value)).unwrap()
            };
            let tries = [
                ("as a relay's", load_relay(&within(RELAY_BASE))),
                ("as an agent's", load_agent(&within(AGENT_BASE))),
                (
                    "as a topology's",
                    load_topology(&within(TOPOLOGY_BASE), false),
                ),
            ];
            if tries.iter().any(|(_, r)| r.is_ok()) {
                Ok(())
            } else {
                let why: Vec<String> = tries
                    .into_iter()
                    .filter_map(|(what, r)| r.err().map(|e| format!("{what}: {e}")))
                    .collect();
                Err(format!("fits no configuration: {}", why.join("; ")))
            }
        }
    }
    .map(|()| s)
}

#[test]
fn documented_configurations_load_with_the_binaries_loaders() {
    let mut faults = Vec::new();
    let mut checked: Vec<(String, Shape)> = Vec::new();
    for (file, text) in documents() {
        if NOT_NODE_CONFIGURATIONS.contains(&file.as_str()) {
            continue;
        }
        for block in fenced_blocks(&text) {
            if !["yaml", "yml"].contains(&block.lang.as_str()) {
                continue;
            }
            let at = format!("{file}:{}", block.line);
            match check_yaml(&block.text) {
                Ok(shape) => checked.push((at, shape)),
                Err(e) => faults.push(format!("{at}: {e}")),
            }
        }
    }
    let count = |shape| checked.iter().filter(|(_, s)| *s == shape).count();
    eprintln!(
        "YAML blocks checked: {} ({} relay, {} agent, {} topology configurations, {} fragments)",
        checked.len() + faults.len(),
        count(Shape::Relay),
        count(Shape::Agent),
        count(Shape::Topology),
        count(Shape::Fragment),
    );
    assert!(faults.is_empty(), "\n{}", faults.join("\n"));
    // CONFIG.md's three examples at least, and the README's agent.
    assert!(
        count(Shape::Relay) >= 1 && count(Shape::Topology) >= 1,
        "{checked:?}"
    );
    assert!(count(Shape::Agent) >= 2, "{checked:?}");
}

// ---- The extraction itself -----------------------------------------------------------

#[test]
fn commands_are_found_in_shell_lines_as_a_reader_takes_them() {
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let relay = |s: &str| vec![(Bin::Relay, words(s))];
    assert_eq!(
        commands_in("relay serve --config DIR/nodes/center/config.yaml   # and each relay's"),
        relay("serve --config DIR/nodes/center/config.yaml")
    );
    assert_eq!(
        commands_in("cargo build --release --workspace && target/release/relay demo"),
        relay("demo")
    );
    assert_eq!(
        commands_in(
            "RUST_LOG=debug relay kubeconfig --user ops > kc.yaml 2>&1 && kubectl get pods"
        ),
        relay("kubeconfig --user ops")
    );
    assert_eq!(
        commands_in("cargo run --release --bin agent -- run --config a.yaml | tee log"),
        vec![(Bin::Agent, words("run --config a.yaml"))]
    );
    assert_eq!(
        commands_in("cargo run -p strata-sim -- run x.yaml; /usr/local/bin/relay --version"),
        relay("--version")
    );
    assert_eq!(
        commands_in(r#"relay apply -f "my app.yaml" --token $(cat DIR/api.tokens)"#),
        vec![(
            Bin::Relay,
            vec![
                "apply".into(),
                "-f".into(),
                "my app.yaml".into(),
                "--token".into(),
                "$(cat DIR/api.tokens)".into()
            ]
        )]
    );
    assert_eq!(
        commands_in("relay get deploy <the app's name> -n shop"),
        vec![(
            Bin::Relay,
            vec![
                "get".into(),
                "deploy".into(),
                "<the app's name>".into(),
                "-n".into(),
                "shop".into()
            ]
        )]
    );
    assert_eq!(commands_in("export STRATA_CA=DIR/ca.crt"), vec![]);
    assert_eq!(
        shell_lines(
            "$ relay get x \\\n    -n y   # z\nNAME  AGE\n$ kubectl get x",
            10
        ),
        [
            (10, "relay get x -n y   # z".to_owned()),
            (13, "kubectl get x".to_owned())
        ]
    );
    assert_eq!(
        inline_spans("a `relay up\n  FILE` b ``x``\n```sh\n`no`\n```\n`c`"),
        [
            (1, "relay up FILE".to_owned()),
            (2, "x".to_owned()),
            (6, "c".to_owned())
        ]
    );
}
