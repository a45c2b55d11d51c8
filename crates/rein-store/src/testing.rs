//! A throwaway PostgreSQL server for tests (cargo feature `testing`), so the Postgres backend is
//! tested against a real server without any set-up: [`TempPostgres::shared`] starts one server
//! per test binary (`initdb` into a temporary directory, `postgres` on a free loopback port) and
//! [`TempPostgres::create_database`] gives each test its own database.
//!
//! PostgreSQL refuses to run as root, so as root the server runs as the `postgres` OS user that
//! Debian's package creates. A watchdog shell holds the server's life: it waits for its stdin to
//! close, which happens when the `TempPostgres` is dropped or the test process ends (a shared
//! server in a `static` is never dropped), then stops the server and removes its directory.
//!
//! Another crate's tests use it through a dev-dependency:
//! `rein-store = { path = "../rein-store", features = ["testing"] }`.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_postgres::NoTls;

/// The superuser `initdb` creates; the server trusts loopback connections, so no password.
const SUPERUSER: &str = "rein";

/// The OS user the server runs as when the tests run as root.
const SERVER_OS_USER: &str = "postgres";

/// Stops the server and removes its directory once stdin closes. `$0` is the binaries'
/// directory, `$1` the server's. Ignores the terminal's Ctrl-C so it still cleans up after one.
const WATCHDOG: &str = r#"trap '' INT HUP
cat >/dev/null
"$0/pg_ctl" stop -D "$1/data" -m immediate -w >/dev/null 2>&1
rm -rf "$1""#;

/// Why a test server could not be had.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TempPostgresError {
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found in $REIN_POSTGRES_BINDIR, \
         `pg_config --bindir`, /usr/lib/postgresql/*/bin or $PATH: install Debian's `postgresql` \
         package (`apt-get install postgresql`)"
    )]
    NotInstalled,
    #[error(
        "running as root, but there is no `{SERVER_OS_USER}` OS user to run PostgreSQL as \
         (PostgreSQL refuses root): install Debian's `postgresql` package, which creates it"
    )]
    NoServerUser,
    #[error("`{command}` failed: {output}")]
    Command { command: String, output: String },
    #[error("{what}: {error}")]
    Io { what: String, error: String },
    #[error("cannot create a test database: {0}")]
    Database(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TempPostgresError {
    let what = what.into();
    move |error| TempPostgresError::Io { what, error: error.to_string() }
}

/// A running PostgreSQL server in a temporary directory, stopped and removed on drop.
#[derive(Debug)]
pub struct TempPostgres {
    bindir: PathBuf,
    dir: PathBuf,
    /// `Some` when running as root: the server's OS user id and group id.
    server_user: Option<(u32, u32)>,
    port: u16,
    watchdog: Option<(Child, ChildStdin)>,
    databases: AtomicU64,
}

impl TempPostgres {
    /// The server of this test binary, started on first use. Every caller after a failed start
    /// gets the same error.
    pub fn shared() -> Result<&'static TempPostgres, TempPostgresError> {
        static SHARED: OnceLock<Result<TempPostgres, TempPostgresError>> = OnceLock::new();
        SHARED.get_or_init(TempPostgres::start).as_ref().map_err(Clone::clone)
    }

    /// Start a new server (a second or two: `initdb`, then `pg_ctl start`, which waits until
    /// the server accepts connections).
    pub fn start() -> Result<Self, TempPostgresError> {
        let bindir = find_bindir()?;
        let server_user = server_user()?;
        // The server user must reach the directory: /tmp, not a root-only $TMPDIR.
        let base = if server_user.is_some() { PathBuf::from("/tmp") } else { std::env::temp_dir() };
        let dir = tempfile::Builder::new()
            .prefix("rein-pg-")
            .tempdir_in(&base)
            .map_err(io(format!("cannot create a directory in {}", base.display())))?
            .keep();
        if let Some((uid, gid)) = server_user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(io(format!("cannot hand {} to the server user", dir.display())))?;
        }
        let mut server = Self {
            bindir,
            dir,
            server_user,
            port: 0,
            watchdog: None,
            databases: AtomicU64::new(0),
        };
        // From here on, dropping `server` (on any error below) stops and removes everything.
        let mut watchdog = server
            .command("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg(&server.bindir)
            .arg(&server.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("cannot start the watchdog shell"))?;
        let stdin = watchdog.stdin.take();
        if let Some(stdin) = stdin {
            server.watchdog = Some((watchdog, stdin));
        }
        server.initdb()?;
        // A free port can be taken by someone else before the server binds it: try a few.
        let mut attempts = 0;
        loop {
            attempts += 1;
            server.port = free_port()?;
            match server.pg_ctl_start() {
                Ok(()) => return Ok(server),
                Err(failure) if attempts == 3 => return Err(failure),
                Err(_) => {}
            }
        }
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's temporary directory (data, socket, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The URL of `database` on this server, as the superuser.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Create a new, empty database and return its URL.
    pub async fn create_database(&self) -> Result<String, TempPostgresError> {
        let name = format!("rein_test_{}", self.databases.fetch_add(1, Ordering::Relaxed));
        let failed = |error: tokio_postgres::Error| {
            let mut text = error.to_string();
            let mut cause = std::error::Error::source(&error);
            while let Some(next) = cause {
                text = format!("{text}: {next}");
                cause = next.source();
            }
            TempPostgresError::Database(text)
        };
        let (client, connection) =
            tokio_postgres::connect(&self.url("postgres"), NoTls).await.map_err(failed)?;
        let connection = tokio::spawn(connection);
        client.batch_execute(&format!("CREATE DATABASE {name}")).await.map_err(failed)?;
        drop(client);
        // The connection ends once the client is gone; its result tells nothing more.
        let _ = connection.await;
        Ok(self.url(&name))
    }

    /// `program`, run as the server's OS user when this process is root.
    fn command(&self, program: impl AsRef<Path>) -> Command {
        let program = program.as_ref();
        match self.server_user {
            Some(_) => {
                let mut command = Command::new("setpriv");
                command
                    .args(["--reuid", SERVER_OS_USER, "--regid", SERVER_OS_USER, "--init-groups"])
                    .arg("--")
                    .arg(program);
                command
            }
            None => Command::new(program),
        }
    }

    fn initdb(&self) -> Result<(), TempPostgresError> {
        let mut command = self.command(self.bindir.join("initdb"));
        command.arg("-D").arg(self.dir.join("data")).args([
            "-U",
            SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        run(command, "initdb").map(drop)
    }

    fn pg_ctl_start(&self) -> Result<(), TempPostgresError> {
        // fsync off and no full-page writes: a test server need not survive a power cut.
        let options = format!(
            "-p {} -h 127.0.0.1 -k {} -F -c synchronous_commit=off -c full_page_writes=off \
             -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log");
        let mut command = self.command(self.bindir.join("pg_ctl"));
        command
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(&log)
            .arg("-o")
            .arg(options);
        run(command, "pg_ctl start").map(drop).map_err(|failure| match failure {
            TempPostgresError::Command { command, output } => {
                TempPostgresError::Command { command, output: format!("{output}\n{}", tail(&log)) }
            }
            other => other,
        })
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        if let Some((mut watchdog, stdin)) = self.watchdog.take() {
            drop(stdin);
            // Wait until the server is stopped and its directory gone.
            let _ = watchdog.wait();
        }
    }
}

/// Run `command`, returning its output if it succeeded.
fn run(mut command: Command, name: &str) -> Result<Output, TempPostgresError> {
    let output = command.stdin(Stdio::null()).output().map_err(io(format!("cannot run {name}")))?;
    if output.status.success() {
        return Ok(output);
    }
    Err(TempPostgresError::Command {
        command: name.to_owned(),
        output: format!(
            "{}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    })
}

/// The end of the server log, to explain a failed start.
fn tail(log: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        let _ = file.read_to_string(&mut text);
    }
    let start = text.char_indices().rev().nth(2000).map_or(0, |(index, _)| index);
    format!("server log: {}", &text[start..])
}

/// A port nobody listens on now.
fn free_port() -> Result<u16, TempPostgresError> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("cannot bind a loopback port"))?;
    Ok(listener.local_addr().map_err(io("cannot read a bound port"))?.port())
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`: `$REIN_POSTGRES_BINDIR`, then
/// `pg_config --bindir`, then Debian's `/usr/lib/postgresql/<version>/bin` (newest first),
/// then `$PATH`.
fn find_bindir() -> Result<PathBuf, TempPostgresError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("REIN_POSTGRES_BINDIR") {
        candidates.push(dir.into());
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        candidates.push(String::from_utf8_lossy(&output.stdout).trim().into());
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let major = name.split('.').next()?.parse().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .collect();
    debian.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    candidates.extend(debian.into_iter().map(|(_, dir)| dir));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates
        .into_iter()
        .find(|dir| ["initdb", "pg_ctl", "postgres"].iter().all(|name| dir.join(name).is_file()))
        .ok_or(TempPostgresError::NotInstalled)
}

/// As root, the ids of the OS user the server must run as; otherwise `None`.
fn server_user() -> Result<Option<(u32, u32)>, TempPostgresError> {
    let id = |args: &[&str]| -> Option<u32> {
        let output = Command::new("id").args(args).output().ok()?;
        if !output.status.success() {
            return None;
        }
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    };
    if id(&["-u"]) != Some(0) {
        return Ok(None);
    }
    match (id(&["-u", SERVER_OS_USER]), id(&["-g", SERVER_OS_USER])) {
        (Some(uid), Some(gid)) => Ok(Some((uid, gid))),
        _ => Err(TempPostgresError::NoServerUser),
    }
}
