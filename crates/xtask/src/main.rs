//! Repository tasks, run as `cargo xtask TASK` (an alias in `.cargo/config.toml`).
//!
//! `cargo xtask soak [OPS]` runs the queues' model check (`long_model_run` in
//! `crates/tickwheel/tests/model.rs`) over OPS random operations a queue, 10^8 by default, in
//! a release build: long enough for the rare states a layout change may break, too long for CI.
//!
//! `cargo xtask test [ARGS...]` is the README's test command, for a machine with nothing but a
//! Rust toolchain: it makes sure the programs the tests start are there (`redis-server` and
//! `redis-cli`, for tickwheel-redis's tests and the CLI's durable workload; `chromium`, for the
//! dashboard's browser tests), finding them or installing them, then runs `cargo test
//! --workspace ARGS...`.
//!
//! A program is looked for in the variable the tests read its path from (for example
//! `TICKWHEEL_REDIS_SERVER`), then on `PATH`, then in the directories package managers install
//! to. Found off `PATH`, its path is passed to the tests in that variable. Not found: as root
//! on Debian or Ubuntu, `apt-get` installs it; otherwise the task stops and says how to.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// A program the tests start.
struct Tool {
    /// Its file name.
    program: &'static str,
    /// The variable the tests take its path from (`PATH` otherwise).
    env: &'static str,
    /// The Debian/Ubuntu package that ships it.
    apt: &'static str,
    /// The Homebrew formula that ships it.
    brew: &'static str,
    /// The Fedora package that ships it.
    dnf: &'static str,
    /// Which tests start it.
    used_by: &'static str,
}

/// What `cargo test --workspace` needs beyond the toolchain.
const TOOLS: &[Tool] = &[
    Tool {
        program: "redis-server",
        env: "TICKWHEEL_REDIS_SERVER",
        apt: "redis-server",
        brew: "redis",
        dnf: "redis",
        used_by: "The tests of tickwheel-redis and the CLI's durable workload",
    },
    // The Redis Cluster test forms its cluster with `redis-cli --cluster create`; Debian's
    // redis-server package depends on redis-tools, which ships it.
    Tool {
        program: "redis-cli",
        env: "TICKWHEEL_REDIS_CLI",
        apt: "redis-server",
        brew: "redis",
        dnf: "redis",
        used_by: "The tests of tickwheel-redis and the CLI's durable workload",
    },
    // The dashboard's tests drive a real headless browser (tickwheel-cli's tests/dashboard.rs).
    Tool {
        program: "chromium",
        env: "TICKWHEEL_CHROMIUM",
        apt: "chromium",
        brew: "--cask chromium",
        dnf: "chromium",
        used_by: "The dashboard's tests (tickwheel-cli, tests/dashboard.rs)",
    },
];

/// Where package managers install programs, searched when one is not on `PATH`.
const USUAL_DIRS: &[&str] = &[
    "/usr/local/bin",
    "/usr/bin",
    "/usr/sbin",
    "/opt/homebrew/bin",
    "/home/linuxbrew/.linuxbrew/bin",
    "/snap/bin",
];

const USAGE: &str = "\
usage: cargo xtask test [--no-install] [CARGO TEST ARGS...]
       cargo xtask soak [OPS]

test   find redis-server, redis-cli and chromium ($TICKWHEEL_REDIS_SERVER,
       $TICKWHEEL_REDIS_CLI, $TICKWHEEL_CHROMIUM, PATH, then the usual install
       directories), install them when missing (apt-get, as root on Debian/Ubuntu) or say
       how to, then run `cargo test --workspace` with the remaining arguments.
       --no-install: never install; stop with the instructions instead.
soak   the queues' model check (tickwheel's tests/model.rs, long_model_run) over OPS
       random operations a queue (default 1e8; 1e8, 100_000_000 accepted), release build:
       Wheel, Heap and HashedWheel (512 and 8 slots), each compared with the BTreeMap model
       after every operation. Prints the time per queue; at 1e8, 10-30 min of one core,
       most of it the 8-slot HashedWheel.";

fn main() -> ExitCode {
    let mut args = env::args_os().skip(1);
    let task = args.next();
    match task.as_ref().and_then(|t| t.to_str()) {
        Some("test") => test(args.collect()),
        Some("soak") => soak(args.collect()),
        Some("help" | "-h" | "--help") | None => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(_) => {
            eprintln!("xtask: unknown task {task:?}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `cargo xtask test`.
fn test(mut args: Vec<OsString>) -> ExitCode {
    let len = args.len();
    args.retain(|a| a != "--no-install");
    let may_install = args.len() == len;

    let mut envs = Vec::new();
    for tool in TOOLS {
        match ensure(tool, may_install) {
            Ok(Found::OnPath(path)) => say(&format!("{} is {}", tool.program, path.display())),
            Ok(Found::Elsewhere(path)) => {
                say(&format!(
                    "{} is {} (not on PATH: passed to the tests as {})",
                    tool.program,
                    path.display(),
                    tool.env
                ));
                envs.push((tool.env, path));
            }
            Err(message) => {
                eprintln!("xtask: {message}");
                return ExitCode::FAILURE;
            }
        }
    }

    // The whole workspace, unless the arguments choose packages.
    let chosen = args
        .iter()
        .take_while(|a| *a != "--")
        .filter_map(|a| a.to_str())
        .any(|a| a.starts_with("-p") || a.starts_with("--package") || a == "--workspace");
    if !chosen {
        args.insert(0, "--workspace".into());
    }
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    say(&format!("cargo test {}", join(&args)));
    match Command::new(cargo)
        .arg("test")
        .args(&args)
        .envs(envs)
        .status()
    {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| c.clamp(1, 255) as u8)),
        Err(e) => {
            eprintln!("xtask: cannot run cargo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The soak's default: operations a queue.
const SOAK_OPS: u64 = 100_000_000;

/// `cargo xtask soak [OPS]`.
fn soak(args: Vec<OsString>) -> ExitCode {
    let ops = match args.as_slice() {
        [] => SOAK_OPS,
        [count] => match count.to_str().and_then(parse_count) {
            Some(ops) => ops,
            None => {
                eprintln!(
                    "xtask: soak: {count:?} is not a count of operations (examples: 1e8, \
                     100_000_000)\n\n{USAGE}"
                );
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("xtask: soak takes at most one argument, OPS\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let args = [
        "test",
        "--release",
        "-p",
        "tickwheel",
        "--test",
        "model",
        "long_model_run",
        "--",
        "--exact",
        "--nocapture",
    ];
    say(&format!(
        "TICKWHEEL_MODEL_OPS={ops} cargo {}",
        args.join(" ")
    ));
    let start = std::time::Instant::now();
    let status = Command::new(cargo)
        .args(args)
        .env("TICKWHEEL_MODEL_OPS", ops.to_string())
        .status();
    let minutes = start.elapsed().as_secs_f64() / 60.0;
    match status {
        Ok(status) if status.success() => {
            say(&format!(
                "soak passed: {ops} operations a queue, {minutes:.1} min"
            ));
            ExitCode::SUCCESS
        }
        Ok(status) => {
            say(&format!("soak FAILED after {minutes:.1} min ({status})"));
            ExitCode::from(status.code().map_or(1, |c| c.clamp(1, 255) as u8))
        }
        Err(e) => {
            eprintln!("xtask: cannot run cargo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A positive count: `100000000`, `100_000_000` or `1e8`.
fn parse_count(text: &str) -> Option<u64> {
    let clean: String = text.trim().chars().filter(|&c| c != '_').collect();
    let value = match clean.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => {
            let m: u64 = mantissa.parse().ok()?;
            10u64.checked_pow(exponent.parse().ok()?)?.checked_mul(m)?
        }
        None => clean.parse().ok()?,
    };
    (value > 0).then_some(value)
}

fn say(line: &str) {
    eprintln!("xtask: {line}");
}

fn join(args: &[OsString]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where a tool was found.
enum Found {
    /// In its variable, or on `PATH`: the tests find it themselves.
    OnPath(PathBuf),
    /// In one of [`USUAL_DIRS`] only: the tests need its path in [`Tool::env`].
    Elsewhere(PathBuf),
}

/// Finds `tool`, installing it first if it is missing and `may_install`.
fn ensure(tool: &Tool, may_install: bool) -> Result<Found, String> {
    if let Some(found) = locate(tool)? {
        return Ok(found);
    }
    if !may_install {
        return Err(missing(tool, "--no-install was given"));
    }
    if !(cfg!(target_os = "linux") && on_path("apt-get").is_some()) {
        return Err(missing(tool, "there is no apt-get here to install it with"));
    }
    if !is_root() {
        return Err(missing(tool, "installing it with apt-get needs root"));
    }
    say(&format!(
        "{} not found: installing the {} package with apt-get",
        tool.program, tool.apt
    ));
    apt_get(&["update"])?;
    apt_get(&["install", "-y", tool.apt])?;
    if let Some(found) = locate(tool)? {
        return Ok(found);
    }
    // Installed according to dpkg, but the file is gone (deleted by hand, say): put it back.
    say(&format!(
        "{} is still missing: reinstalling {}",
        tool.program, tool.apt
    ));
    apt_get(&["install", "-y", "--reinstall", tool.apt])?;
    locate(tool)?.ok_or_else(|| missing(tool, "apt-get installed the package without it"))
}

/// Looks for `tool` in its variable, on `PATH`, then in [`USUAL_DIRS`].
fn locate(tool: &Tool) -> Result<Option<Found>, String> {
    if let Some(path) = env::var_os(tool.env) {
        let path = PathBuf::from(path);
        // The tests run `Command::new` on the variable's value, which may be a bare name.
        let resolved = if path.components().count() == 1 {
            on_path(&path)
        } else {
            Some(path.clone()).filter(|p| is_executable(p))
        };
        return match resolved {
            Some(p) => Ok(Some(Found::OnPath(p))),
            None => Err(format!(
                "{} is set to {}, which is not an executable file: fix or unset it",
                tool.env,
                path.display()
            )),
        };
    }
    if let Some(path) = on_path(tool.program) {
        return Ok(Some(Found::OnPath(path)));
    }
    Ok(USUAL_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(exe(tool.program)))
        .find(|p| is_executable(p))
        .map(Found::Elsewhere))
}

fn missing(tool: &Tool, why: &str) -> String {
    format!(
        "{program} was not found ({env} unset, not on PATH, not in {dirs}), and {why}.\n\
         {used_by} start {program}. Install it, then run `cargo xtask test` again:\n  \
         Debian/Ubuntu: sudo apt-get install -y {apt}\n  \
         macOS:         brew install {brew}\n  \
         Fedora:        sudo dnf install {dnf}\n\
         or set {env} to its path.",
        program = tool.program,
        env = tool.env,
        dirs = USUAL_DIRS.join(", "),
        apt = tool.apt,
        brew = tool.brew,
        dnf = tool.dnf,
        used_by = tool.used_by,
    )
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("apt-get {} failed ({status})", args.join(" ")))
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.status.success() && out.stdout.trim_ascii() == b"0")
}

fn on_path(program: impl AsRef<Path>) -> Option<PathBuf> {
    let name = exe(program.as_ref().to_str()?);
    env::split_paths(&env::var_os("PATH")?)
        .map(|dir| dir.join(&name))
        .find(|p| is_executable(p))
}

fn exe(program: &str) -> String {
    format!("{program}{}", env::consts::EXE_SUFFIX)
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = path.metadata() else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soak_counts_parse_in_every_spelling_and_reject_nonsense() {
        assert_eq!(parse_count("1e8"), Some(100_000_000));
        assert_eq!(parse_count("100_000_000"), Some(100_000_000));
        assert_eq!(parse_count(" 5000 "), Some(5_000));
        for bad in ["0", "", "-3", "1e30", "1.5e3", "ten", "1e"] {
            assert_eq!(parse_count(bad), None, "{bad:?}");
        }
    }
}
