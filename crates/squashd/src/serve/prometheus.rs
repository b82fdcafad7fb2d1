//! `squashd status --prometheus`: the status report in Prometheus's text exposition format
//! (version 0.0.4), for node_exporter's textfile collector or any scraper. The figures are
//! those of `status --json`; names follow Prometheus's conventions (a `squashd_` prefix, base
//! units, `_total` for counters, `_bytes` and `_seconds`).

use crate::control::protocol::{Status, Tier, TierSet};
use std::fmt::Write as _;

/// One metric family: its samples, each with its labels.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Family {
            name,
            kind,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push((labels, value));
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        for (labels, value) in &self.samples {
            out.push_str(self.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (key, value)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{key}=\"{}\"", escape(value));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {value}");
        }
    }
}

/// A label value as the format wants it: backslash, double quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The tiers of a [`TierSet`] by their label.
fn tiers(set: &TierSet) -> [(&'static str, &Tier); 3] {
    [
        ("metadata", &set.metadata),
        ("data", &set.data),
        ("compressed", &set.compressed),
    ]
}

/// The report as Prometheus text.
pub(super) fn render(status: &Status) -> String {
    let mut rss = Family::new(
        "squashd_daemon_resident_bytes",
        "gauge",
        "Resident memory of the daemon.",
    );
    rss.add(Vec::new(), status.rss_bytes as f64);
    let mut capacity = Family::new(
        "squashd_cache_capacity_bytes",
        "gauge",
        "Budget of the shared cache tier.",
    );
    let mut resident = Family::new(
        "squashd_cache_resident_bytes",
        "gauge",
        "Bytes held by the shared cache tier.",
    );
    for (tier, t) in tiers(&status.shared_cache) {
        capacity.add(vec![("tier", tier.to_string())], t.capacity_bytes as f64);
        resident.add(vec![("tier", tier.to_string())], t.resident_bytes as f64);
    }
    let mut families = vec![rss, capacity, resident];
    let mut per_image = [
        Family::new("squashd_image_size_bytes", "gauge", "Size of the image."),
        Family::new(
            "squashd_image_open_handles",
            "gauge",
            "Files and directories open through the mount.",
        ),
        Family::new(
            "squashd_image_requests_total",
            "counter",
            "Requests that reached squashd (FUSE requests; on the kernel path, blob reads).",
        ),
        Family::new(
            "squashd_image_errors_total",
            "counter",
            "Requests that failed with EIO.",
        ),
        Family::new(
            "squashd_image_verity_failures_total",
            "counter",
            "Reads of blocks that failed their dm-verity hash (0 for an image not verified).",
        ),
        Family::new(
            "squashd_image_read_bytes_total",
            "counter",
            "Bytes read from the image file.",
        ),
        Family::new(
            "squashd_image_healthy",
            "gauge",
            "1 when the image's health is ok, else 0.",
        ),
        Family::new(
            "squashd_image_attached_seconds",
            "gauge",
            "Seconds since the image was attached.",
        ),
    ];
    let mut read_ahead = [
        Family::new(
            "squashd_image_read_ahead_loads_total",
            "counter",
            "Blocks decompressed ahead of streaming readers.",
        ),
        Family::new(
            "squashd_image_read_ahead_used_total",
            "counter",
            "Blocks decompressed ahead that a reader then read.",
        ),
        Family::new(
            "squashd_image_read_ahead_wasted_total",
            "counter",
            "Blocks decompressed ahead that no reader read (evicted first, or left behind).",
        ),
        Family::new(
            "squashd_image_read_ahead_busy_cuts_total",
            "counter",
            "Reads of a stream whose read-ahead was cut short because the CPUs were busy.",
        ),
    ];
    let mut cache = [
        Family::new(
            "squashd_image_cache_hits_total",
            "counter",
            "Cache hits of the image, by tier.",
        ),
        Family::new(
            "squashd_image_cache_misses_total",
            "counter",
            "Cache misses of the image, by tier.",
        ),
        Family::new(
            "squashd_image_cache_loads_total",
            "counter",
            "Blocks decompressed (loaded) for the image, by tier.",
        ),
        Family::new(
            "squashd_image_cache_failures_total",
            "counter",
            "Loads that failed (corrupt block, I/O error), by tier.",
        ),
    ];
    let mut remote = [
        Family::new(
            "squashd_remote_requests_total",
            "counter",
            "HTTP requests sent for a remote image, retries included.",
        ),
        Family::new(
            "squashd_remote_retries_total",
            "counter",
            "Requests sent again after a transient failure.",
        ),
        Family::new(
            "squashd_remote_fetched_bytes_total",
            "counter",
            "Bytes received for a remote image.",
        ),
        Family::new(
            "squashd_remote_disk_cache_hits_total",
            "counter",
            "Fetch units of a remote image answered from the disk cache.",
        ),
        Family::new(
            "squashd_remote_wait_seconds_total",
            "counter",
            "Seconds readers spent waiting on the network, summed over readers.",
        ),
    ];
    for image in &status.images {
        if let Some(r) = &image.remote {
            let labels = vec![
                ("mountpoint", image.mountpoint.display().to_string()),
                ("image", image.image.display().to_string()),
            ];
            let values = [
                r.requests as f64,
                r.retries as f64,
                r.bytes_fetched as f64,
                r.disk_cache_hits as f64,
                r.wait_seconds,
            ];
            for (family, value) in remote.iter_mut().zip(values) {
                family.add(labels.clone(), value);
            }
        }
        let labels = || {
            vec![
                ("mountpoint", image.mountpoint.display().to_string()),
                ("image", image.image.display().to_string()),
                ("engine", image.engine.clone()),
            ]
        };
        let values = [
            image.size_bytes as f64,
            image.open_handles as f64,
            image.requests as f64,
            image.errors as f64,
            image.verity_failures as f64,
            image.bytes_read as f64,
            if image.health == "ok" { 1.0 } else { 0.0 },
            image.attached_secs as f64,
        ];
        for (family, value) in per_image.iter_mut().zip(values) {
            family.add(labels(), value);
        }
        let ra = &image.read_ahead;
        for (family, value) in
            read_ahead
                .iter_mut()
                .zip([ra.loads, ra.used, ra.wasted, ra.busy_cuts])
        {
            family.add(labels(), value as f64);
        }
        for (tier, t) in tiers(&image.cache) {
            let with_tier = || {
                let mut l = labels();
                l.push(("tier", tier.to_string()));
                l
            };
            for (family, value) in cache
                .iter_mut()
                .zip([t.hits, t.misses, t.loads, t.failures])
            {
                family.add(with_tier(), value as f64);
            }
        }
    }
    families.extend(per_image);
    families.push(verity_memory(status));
    families.extend(read_ahead);
    families.extend(cache);
    families.extend(remote);
    let mut disk = [
        Family::new(
            "squashd_disk_cache_used_bytes",
            "gauge",
            "Bytes of a disk cache's entries.",
        ),
        Family::new(
            "squashd_disk_cache_budget_bytes",
            "gauge",
            "A disk cache's budget.",
        ),
        Family::new(
            "squashd_disk_cache_evictions_total",
            "counter",
            "Entries removed from a disk cache to make room.",
        ),
        Family::new(
            "squashd_disk_cache_corrupt_total",
            "counter",
            "Disk-cache entries found damaged and fetched again.",
        ),
    ];
    for cache in &status.disk_caches {
        let values = [
            cache.used_bytes,
            cache.budget_bytes,
            cache.evictions,
            cache.corrupt,
        ];
        for (family, value) in disk.iter_mut().zip(values) {
            family.add(vec![("dir", cache.dir.display().to_string())], value as f64);
        }
    }
    families.extend(disk);
    let mut out = String::new();
    for family in &families {
        family.write(&mut out);
    }
    out
}

/// The memory of each verified image's checking, taken from the metadata budget: its bitmap
/// of checked blocks and its hash blocks in the metadata cache.
fn verity_memory(status: &Status) -> Family {
    let mut family = Family::new(
        "squashd_image_verity_memory_bytes",
        "gauge",
        "Bytes a verified image's checking holds within the metadata cache budget, by kind.",
    );
    for image in &status.images {
        let Some(v) = &image.verity else { continue };
        for (kind, bytes) in [
            ("bitmap", v.bitmap_bytes),
            ("hash_blocks", v.hash_cache_bytes),
        ] {
            let labels = vec![
                ("mountpoint", image.mountpoint.display().to_string()),
                ("image", image.image.display().to_string()),
                ("kind", kind.to_string()),
            ];
            family.add(labels, bytes as f64);
        }
    }
    family
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::protocol::ImageStatus;

    #[test]
    fn every_sample_line_is_well_formed_and_labels_are_escaped() {
        let image = ImageStatus {
            image: "/srv/a \"b\".sqfs".into(),
            mountpoint: "/mnt/a\\b".into(),
            options: Vec::new(),
            health: "ok".into(),
            last_error: None,
            engine: "kernel".into(),
            transport: "dev-fuse".into(),
            ring_memory_bytes: 0,
            ring_entries: 0,
            ring_requests: 0,
            ring_local_requests: 0,
            ring_idle_thread_requests: 0,
            translation: None,
            remote: None,
            verity: None,
            verity_failures: 3,
            size_bytes: 4096,
            inodes: 3,
            open_handles: 1,
            errors: 2,
            requests: 5,
            listing_requests: 0,
            short_listings: 0,
            unlinked_listings: 0,
            waited_listings: 0,
            bare_entries: 0,
            late_lookups: 0,
            bytes_read: 100,
            private_cache: false,
            cache: TierSet::default(),
            read_ahead: Default::default(),
            attached_secs: 9,
        };
        let status = Status {
            pid: 1,
            rss_bytes: 123,
            ring_memory_bytes: 0,
            shared_cache: TierSet::default(),
            images: vec![image],
            disk_caches: Vec::new(),
        };
        let text = render(&status);
        assert!(text.contains(
            "squashd_image_errors_total{mountpoint=\"/mnt/a\\\\b\",image=\"/srv/a \\\"b\\\".sqfs\",engine=\"kernel\"} 2\n"
        ), "{text}");
        assert!(
            text.contains("squashd_image_verity_failures_total{mountpoint=\"/mnt/a\\\\b\",image=\"/srv/a \\\"b\\\".sqfs\",engine=\"kernel\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("squashd_daemon_resident_bytes 123\n"),
            "{text}"
        );
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                declared.insert(parts.next().unwrap().to_string());
                assert!(matches!(parts.next(), Some("gauge" | "counter")), "{line}");
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(declared.contains(name), "{name} has no TYPE line before it");
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            if name.ends_with("_total") {
                assert!(text.contains(&format!("# TYPE {name} counter")), "{name}");
            }
        }
    }
}
