//! `squashd attach`, `detach` and `status`: clients of a running `squashd serve`.

use crate::control::protocol::{Request, Response, Status, DEFAULT_SOCKET};
use crate::control::send_request;
use crate::quote;
use anyhow::{bail, Context};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Where to reach the daemon.
#[derive(clap::Args, Debug)]
pub struct SocketArg {
    /// The daemon's control socket [env: SQUASHD_SOCKET; default: /run/squashd/control.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

impl SocketArg {
    fn path(&self) -> PathBuf {
        self.socket
            .clone()
            .or_else(|| std::env::var_os("SQUASHD_SOCKET").map(PathBuf::from))
            .unwrap_or_else(|| DEFAULT_SOCKET.into())
    }
}

/// Arguments of `squashd attach`.
#[derive(clap::Args, Debug)]
pub struct AttachArgs {
    /// The SquashFS image file, or an AppImage or Apptainer SIF file holding one.
    image: PathBuf,
    /// The directory to mount it on.
    mountpoint: PathBuf,
    /// Mount options, comma-separated, as `squashd mount -o` takes them. Cache budget options
    /// give the image a budget of its own instead of a share of the daemon's.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    #[command(flatten)]
    socket: SocketArg,
}

/// Arguments of `squashd detach`.
#[derive(clap::Args, Debug)]
pub struct DetachArgs {
    /// Mount point of the image to detach.
    mountpoint: PathBuf,
    /// Detach even while files are open (as `umount -l`).
    #[arg(long)]
    lazy: bool,
    #[command(flatten)]
    socket: SocketArg,
}

/// Arguments of `squashd status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print the report as JSON.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Print the report in Prometheus's text format (for node_exporter's textfile collector).
    #[arg(long)]
    prometheus: bool,
    #[command(flatten)]
    socket: SocketArg,
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(p).with_context(|| format!("{}: bad path", p.display()))
}

/// Sends `request` (with `file` passed beside it) and reads the answer.
fn call(socket: &Path, request: &Request, file: Option<&File>) -> anyhow::Result<Response> {
    let conn = UnixStream::connect(socket).with_context(|| {
        format!(
            "{}: cannot reach the daemon (is `squashd serve` running?)",
            socket.display()
        )
    })?;
    let mut text = serde_json::to_string(request)?;
    text.push('\n');
    send_request(&conn, &text, file)?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line)?;
    serde_json::from_str(&line).context("the daemon's answer is malformed")
}

fn expect_ok(response: Response) -> anyhow::Result<()> {
    match response {
        // The daemon's messages name paths a user chose: printed on one line, escapes and all
        // (a daemon of another version may not have quoted them).
        Response::Ok { message } => {
            println!("{}", crate::quote::one_line(&message));
            Ok(())
        }
        Response::Error { message } => bail!("{}", crate::quote::one_line(&message)),
        Response::Status(_) => bail!("the daemon answered with a status report"),
    }
}

/// Runs `squashd attach`. The image is opened here, with the caller's own rights, and passed
/// to the daemon as an open file: the daemon serves only images its caller can read.
pub fn attach(args: AttachArgs) -> anyhow::Result<()> {
    // A remote image is named by its address, which the daemon fetches itself (root only).
    let remote = crate::remote::is_remote(&args.image);
    let image = if remote {
        args.image.clone()
    } else {
        absolute(&args.image)?
    };
    // A wrong option is the caller's usage error (exit 2), found before the daemon is asked.
    crate::options::Options::parse(&args.options, &image, crate::options::Context::Daemon)?;
    let file = if remote {
        None
    } else {
        Some(File::open(&image).with_context(|| format!("{}: cannot open", image.display()))?)
    };
    let request = Request::Attach {
        image,
        mountpoint: absolute(&args.mountpoint)?,
        options: args.options,
    };
    expect_ok(call(&args.socket.path(), &request, file.as_ref())?)
}

/// Runs `squashd detach`.
pub fn detach(args: DetachArgs) -> anyhow::Result<()> {
    let request = Request::Detach {
        mountpoint: absolute(&args.mountpoint)?,
        lazy: args.lazy,
    };
    expect_ok(call(&args.socket.path(), &request, None)?)
}

/// Runs `squashd status`.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let status = match call(&args.socket.path(), &Request::Status, None)? {
        Response::Status(s) => *s,
        Response::Error { message } => bail!("{}", crate::quote::one_line(&message)),
        Response::Ok { message } => {
            bail!("unexpected answer: {}", crate::quote::one_line(&message))
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else if args.prometheus {
        print!("{}", super::prometheus::render(&status));
    } else {
        print_table(&status);
    }
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!("{:.1}MiB", bytes as f64 / (1 << 20) as f64)
}

fn kib(bytes: u64) -> String {
    format!("{:.1}KiB", bytes as f64 / 1024.0)
}

fn print_table(s: &Status) {
    let c = &s.shared_cache;
    println!(
        "daemon pid {}, RSS {}; shared cache: metadata {} of {}, data {} of {}, compressed {} of {}",
        s.pid,
        mib(s.rss_bytes),
        mib(c.metadata.resident_bytes),
        mib(c.metadata.capacity_bytes),
        mib(c.data.resident_bytes),
        mib(c.data.capacity_bytes),
        mib(c.compressed.resident_bytes),
        mib(c.compressed.capacity_bytes),
    );
    if s.ring_memory_bytes > 0 {
        println!(
            "FUSE over io_uring: {} of rings in all",
            mib(s.ring_memory_bytes)
        );
    }
    for c in &s.disk_caches {
        println!(
            "disk cache {}: {} of {} in {} entries; {} hits, {} misses, {} evicted, {} damaged",
            quote::path(&c.dir),
            mib(c.used_bytes),
            mib(c.budget_bytes),
            c.entries,
            c.hits,
            c.misses,
            c.evictions,
            c.corrupt
        );
    }
    // The mount point column is as wide as its longest entry, so that long paths keep the
    // columns after them in line. Paths are shown quoted where they need it (a user chose
    // them; see quote.rs), as wide as they are shown.
    let width = s
        .images
        .iter()
        .map(|i| quote::path(&i.mountpoint).to_string().chars().count())
        .fold(28, usize::max);
    println!(
        "{:<width$} {:>6} {:>9} {:>10} {:>5} {:>9} {:>9} {:>9} {:>8} {:>10} {:>6}  HEALTH  IMAGE",
        "MOUNTPOINT",
        "PATH",
        "TRANSPORT",
        "SIZE",
        "OPEN",
        "REQUESTS",
        "META HIT",
        "DATA HIT",
        "DECOMP",
        "READ",
        "ERRORS"
    );
    for i in &s.images {
        println!(
            "{:<width$} {:>6} {:>9} {:>10} {:>5} {:>9} {:>8.1}% {:>8.1}% {:>8} {:>10} {:>6}  {}  {}{}",
            quote::path(&i.mountpoint),
            i.engine,
            i.transport,
            mib(i.size_bytes),
            i.open_handles,
            i.requests,
            i.cache.metadata.hit_ratio * 100.0,
            i.cache.data.hit_ratio * 100.0,
            i.cache.metadata.loads + i.cache.data.loads,
            mib(i.bytes_read),
            i.errors,
            quote::one_line(&i.health),
            quote::path(&i.image),
            if i.private_cache { " (own cache)" } else { "" },
        );
        let ra = &i.read_ahead;
        if ra.loads + ra.busy_cuts > 0 {
            println!(
                "{:<width$} read-ahead: {} blocks decompressed ahead ({} used, {} wasted, {} pending) \
                 for {} streams; {} reads cut short (CPUs busy)",
                "", ra.loads, ra.used, ra.wasted, ra.pending, ra.streams, ra.busy_cuts
            );
        }
        if i.ring_memory_bytes > 0 {
            println!(
                "{:<width$} io_uring: {} of rings ({} entries), {} requests over them \
                 ({} answered on the requester's CPU)",
                "",
                mib(i.ring_memory_bytes),
                i.ring_entries,
                i.ring_requests,
                i.ring_local_requests
            );
        }
        if let Some(v) = &i.verity {
            println!(
                "{:<width$} verity: root hash {} from {}{}; {} of {} blocks checked, {} failed; \
                 bitmap {}, hash blocks {} (in the metadata budget)",
                "",
                v.root_hash,
                quote::one_line(&v.root_hash_from),
                v.signed_by
                    .as_ref()
                    .map(|s| format!(", signed by {}", quote::one_line(s)))
                    .unwrap_or_default(),
                v.verified_blocks,
                v.data_blocks,
                i.verity_failures,
                kib(v.bitmap_bytes),
                kib(v.hash_cache_bytes)
            );
        }
        if let Some(r) = &i.remote {
            println!(
                "{:<width$} remote: fetched {} in {} requests ({} retries, {} failed), {} units prefetched, \
                 {} disk-cache hits, readers waited {:.2} s; {}",
                "",
                mib(r.bytes_fetched),
                r.requests,
                r.retries,
                r.failures,
                r.units_prefetched,
                r.disk_cache_hits,
                r.wait_seconds,
                quote::one_line(&r.version)
            );
        }
    }
}
