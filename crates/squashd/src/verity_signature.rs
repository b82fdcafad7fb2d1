//! Root hash signatures as systemd checks them when it cannot leave them to the kernel's
//! keyring: a detached PKCS#7 (DER) signature of the root hash in lower-case hex, made with a
//! key whose certificate is in one of the `verity.d` directories (`/etc/verity.d`,
//! `/run/verity.d`, `/usr/local/lib/verity.d`, `/usr/lib/verity.d`; `*.crt` files, PEM), checked
//! with OpenSSL's `PKCS7_verify` with `PKCS7_NOINTERN | PKCS7_NOVERIFY`: the signer must be one
//! of those certificates (not one the signature carries), and no chain is built: the
//! directories are the trust. OpenSSL (the `openssl` crate) is what systemd and cryptsetup use
//! for this, so that what they accept, squashd accepts.

use openssl::pkcs7::{Pkcs7, Pkcs7Flags};
use openssl::stack::Stack;
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::X509;
use std::path::{Path, PathBuf};

/// Where systemd looks for the certificates of trusted root hash signers.
pub(crate) const CERTIFICATE_DIRS: &[&str] = &[
    "/etc/verity.d",
    "/run/verity.d",
    "/usr/local/lib/verity.d",
    "/usr/lib/verity.d",
];

/// The certificates (`*.crt`, PEM, one or more each) in `dirs`; missing directories are
/// skipped.
fn certificates(dirs: &[PathBuf]) -> Result<Vec<X509>, String> {
    let mut certs = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "crt"))
            .collect();
        paths.sort();
        for path in paths {
            let pem = std::fs::read(&path)
                .map_err(|e| format!("{}: cannot read the certificate: {e}", path.display()))?;
            let found = X509::stack_from_pem(&pem)
                .map_err(|e| format!("{}: not a PEM certificate: {e}", path.display()))?;
            certs.extend(found);
        }
    }
    Ok(certs)
}

/// Checks `signature` (DER PKCS#7) over `root_hash_hex` against the certificates in `dirs`.
/// Returns the signer's subject; an error of one line says why the signature is refused.
pub(crate) fn check(
    root_hash_hex: &str,
    signature: &[u8],
    dirs: &[PathBuf],
) -> Result<String, String> {
    let shown = || {
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let certs = certificates(dirs)?;
    if certs.is_empty() {
        return Err(format!(
            "no trusted certificate (*.crt) in {} to check the root hash signature with",
            shown()
        ));
    }
    let pkcs7 = Pkcs7::from_der(signature)
        .map_err(|e| format!("the root hash signature is not DER PKCS#7: {e}"))?;
    let mut stack = Stack::new().map_err(|e| e.to_string())?;
    for cert in &certs {
        stack.push(cert.clone()).map_err(|e| e.to_string())?;
    }
    // With NOVERIFY no chain is built, so the store stays empty.
    let store = X509StoreBuilder::new().map_err(|e| e.to_string())?.build();
    pkcs7
        .verify(
            &stack,
            &store,
            Some(root_hash_hex.as_bytes()),
            None,
            Pkcs7Flags::NOINTERN | Pkcs7Flags::NOVERIFY | Pkcs7Flags::BINARY,
        )
        .map_err(|e| {
            format!(
                "the root hash signature does not verify with the certificates in {}: {e}",
                shown()
            )
        })?;
    let signers = pkcs7
        .signers(&stack, Pkcs7Flags::NOINTERN)
        .map_err(|e| e.to_string())?;
    Ok(signers.iter().next().map(subject).unwrap_or_default())
}

#[allow(deprecated)] // as_utf8: a subject with a NUL inside is cut there, harmless in a message
fn subject(cert: &openssl::x509::X509Ref) -> String {
    cert.subject_name()
        .entries()
        .filter_map(|e| {
            Some(format!(
                "{}={}",
                e.object().nid().short_name().ok()?,
                e.data().as_utf8().ok()?
            ))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The directories to trust: the one given, else systemd's.
pub(crate) fn dirs(given: Option<&Path>) -> Vec<PathBuf> {
    match given {
        Some(dir) => vec![dir.to_path_buf()],
        None => CERTIFICATE_DIRS.iter().map(PathBuf::from).collect(),
    }
}

/// Base64 (a `-verity-sig` partition's `signature`), decoded.
pub(crate) fn from_base64(text: &str) -> Result<Vec<u8>, String> {
    openssl::base64::decode_block(text.trim()).map_err(|e| format!("not base64: {e}"))
}
