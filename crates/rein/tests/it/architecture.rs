//! The invariants ARCHITECTURE.md states about the crate graph and the call's context, checked
//! on the sources themselves: the crates' `Cargo.toml`s and their non-test Rust.
//!
//! - Only `rein-runtime` reads the config: no other crate depends on `toml` (the simulator aside,
//!   for its own scenario files) or names `toml::` in its code.
//! - Only `rein-gateway` knows HTTP servers and their status codes: no other library crate
//!   depends on `axum`, and `StatusCode` appears in no other library crate's code except where a
//!   client reads an upstream's answer or the simulator answers; inside the gateway, the wire
//!   formats use no server types either.
//! - No production crate depends on the simulator except behind a feature.
//! - One `CallContext` per call, made at the edge: nothing below it builds a deadline.
//! - Unsafe code is the global allocator's alone: every other crate takes the workspace's lints,
//!   which forbid it.
//!
//! And one rule of the code's layout: each type's inherent `impl` lives in the file that defines
//! the type, so concept modules hold free functions and the type's file its methods.

use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every crate's name and its directory.
fn crates() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(workspace().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let manifest = dir.join("Cargo.toml");
        if manifest.is_file() {
            let table: toml::Table = fs::read_to_string(&manifest).unwrap().parse().unwrap();
            let name = table["package"]["name"].as_str().unwrap().to_string();
            out.push((name, dir));
        }
    }
    out.sort();
    assert!(out.len() >= 8, "every crate is found: {out:?}");
    out
}

/// The `[dependencies]` table of a crate (not its dev-dependencies).
fn dependencies(dir: &Path) -> toml::Table {
    let table: toml::Table = fs::read_to_string(dir.join("Cargo.toml")).unwrap().parse().unwrap();
    table.get("dependencies").and_then(|d| d.as_table()).cloned().unwrap_or_default()
}

/// The non-test Rust of a crate's `src/`: each file up to its `#[cfg(test)]` module, without
/// comment lines, and no `tests.rs` or `*_tests.rs` files.
fn production_sources(dir: &Path) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&dir.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name != "tests.rs" && !name.ends_with("_tests.rs")
        })
        .map(|path| {
            let text = fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let code: Vec<&str> =
                code.lines().filter(|line| !line.trim_start().starts_with("//")).collect();
            (path, code.join("\n"))
        })
        .collect()
}

fn relative(path: &Path) -> String {
    let root = workspace().canonicalize().unwrap();
    let path = path.canonicalize().unwrap();
    path.strip_prefix(&root).unwrap().display().to_string()
}

#[test]
fn only_the_runtime_reads_the_config() {
    for (name, dir) in crates() {
        if name == "rein-runtime" {
            assert!(dependencies(&dir).contains_key("toml"), "rein-runtime parses rein.toml");
            continue;
        }
        // The simulator reads its own scenario files, never rein.toml.
        if name == "rein-sim" {
            continue;
        }
        assert!(
            !dependencies(&dir).contains_key("toml"),
            "{name} depends on `toml`: only rein-runtime reads the config"
        );
        for (path, code) in production_sources(&dir) {
            assert!(
                !code.contains("toml::"),
                "{} reads TOML: only rein-runtime reads the config",
                relative(&path)
            );
        }
    }
}

#[test]
fn only_the_gateway_knows_http_status_codes() {
    // Clients read an upstream's status (the provider adapters, the tools' http rungs); the
    // simulator is a server of its own. Everything else is below HTTP.
    let reads_upstream_status = ["rein-providers", "rein-tools", "rein-sim", "rein"];
    for (name, dir) in crates() {
        if name == "rein-gateway" {
            assert!(dependencies(&dir).contains_key("axum"), "the gateway serves HTTP");
            // Its wire formats are pure: bodies and kinds, no server types.
            let wire: Vec<_> = production_sources(&dir)
                .into_iter()
                .filter(|(path, _)| path.components().any(|c| c.as_os_str() == "wire"))
                .collect();
            assert!(wire.len() >= 5, "the wire modules are found");
            for (path, code) in wire {
                assert!(
                    !code.contains("axum") && !code.contains("StatusCode"),
                    "{} uses HTTP server types: the wire formats are pure",
                    relative(&path)
                );
            }
            continue;
        }
        assert!(
            !dependencies(&dir).contains_key("axum"),
            "{name} depends on axum: only rein-gateway serves HTTP"
        );
        if reads_upstream_status.contains(&name.as_str()) {
            continue;
        }
        for (path, code) in production_sources(&dir) {
            assert!(
                !code.contains("StatusCode"),
                "{} uses HTTP status codes: only rein-gateway maps to them",
                relative(&path)
            );
        }
    }
}

#[test]
fn no_production_crate_depends_on_the_simulator_except_behind_a_feature() {
    for (name, dir) in crates() {
        let Some(sim) = dependencies(&dir).get("rein-sim").cloned() else { continue };
        let optional = sim.get("optional").and_then(|o| o.as_bool()).unwrap_or(false);
        assert!(optional, "{name} depends on rein-sim outside a feature (`optional = true`)");
    }
}

#[test]
fn unsafe_code_is_the_allocators_alone() {
    let root: toml::Table =
        fs::read_to_string(workspace().join("Cargo.toml")).unwrap().parse().unwrap();
    let forbidden = root["workspace"]["lints"]["rust"]["unsafe_code"].as_str();
    assert_eq!(forbidden, Some("forbid"), "the workspace forbids unsafe code");
    let mut dirs: Vec<(String, PathBuf)> = crates();
    dirs.push(("rein-bench-floor".into(), workspace().join("bench/floor")));
    for (name, dir) in dirs {
        let table: toml::Table =
            fs::read_to_string(dir.join("Cargo.toml")).unwrap().parse().unwrap();
        let inherits = table
            .get("lints")
            .and_then(|lints| lints.get("workspace"))
            .and_then(|workspace| workspace.as_bool())
            .unwrap_or(false);
        if name == "rein-alloc" {
            assert!(!inherits, "rein-alloc is the global allocator: it keeps lints of its own");
        } else {
            assert!(
                inherits,
                "{name} must take the workspace's lints (`[lints] workspace = true`)"
            );
        }
    }
}

#[test]
fn nothing_below_the_edge_builds_a_deadline() {
    // Where a call's context (and so its deadline) may be made: its definition, and the edge.
    let allowed = [
        "crates/rein-core/src/clock.rs",
        "crates/rein-core/src/context.rs",
        "crates/rein-gateway/src/server/intake.rs",
        // An eval's or a probe's business rule checks an answer offline, outside any call.
        "crates/rein-core/src/eval.rs",
        // The online judge's call starts after the judged call is over, on its own deadline.
        "crates/rein-runtime/src/online_judge.rs",
    ];
    let makers = [
        "Deadline::after(",
        "Deadline::unbounded(",
        "CallContext::new(",
        "CallContext::with_deadline(",
    ];
    let mut seen = Vec::new();
    for (_, dir) in crates() {
        for (path, code) in production_sources(&dir) {
            let file = relative(&path);
            for maker in makers {
                if code.contains(maker) {
                    seen.push(file.clone());
                    assert!(
                        allowed.contains(&file.as_str()),
                        "{file} builds a deadline (`{maker}`): below the edge, narrow the call's own (`CallContext::narrow`, `Deadline::within`)"
                    );
                }
            }
        }
    }
    assert!(
        seen.iter().any(|file| file == "crates/rein-gateway/src/server/intake.rs"),
        "the edge makes the context: {seen:?}"
    );
}

/// Skips one `<...>` (nested brackets included) at the start of `text`, if there is one.
fn skip_generics(text: &str) -> Option<&str> {
    if !text.starts_with('<') {
        return Some(text);
    }
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[i + 1..]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The identifier at the start of `text`, and what follows it.
fn identifier(text: &str) -> (&str, &str) {
    let end = text.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(text.len());
    text.split_at(end)
}

/// The type an inherent impl line names: `impl(<...>)? Name(<...>)? {`. Trait impls
/// (`impl Trait for X {`) and anything else give `None`.
fn inherent_impl(line: &str) -> Option<&str> {
    let rest = skip_generics(line.strip_prefix("impl")?)?;
    let rest = rest.strip_prefix(' ')?.trim_start();
    let (name, rest) = identifier(rest);
    if name.is_empty() {
        return None;
    }
    (skip_generics(rest)?.trim() == "{").then_some(name)
}

/// The type a line defines: `struct Name` or `enum Name`, under any `pub`/`pub(...)`.
fn defined_type(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scope) => &scope[scope.find(')')? + 1..],
            None => after,
        };
        rest = rest.strip_prefix(' ')?;
    }
    let rest = rest.strip_prefix("struct ").or_else(|| rest.strip_prefix("enum "))?;
    match identifier(rest.trim_start()).0 {
        "" => None,
        name => Some(name),
    }
}

#[test]
fn the_impl_matcher_tells_inherent_impls_from_the_rest() {
    assert_eq!(inherent_impl("impl Store {"), Some("Store"));
    assert_eq!(inherent_impl("impl<'a> Wording<'a> {"), Some("Wording"));
    assert_eq!(inherent_impl("impl<T: Into<String>> Holder<T> {"), Some("Holder"));
    assert_eq!(inherent_impl("impl fmt::Debug for Store {"), None);
    assert_eq!(inherent_impl("impl From<Error> for ToolError {"), None);
    assert_eq!(inherent_impl("impl Store"), None);
    assert_eq!(inherent_impl("    impl Store {"), None);
    assert_eq!(defined_type("pub struct Store {"), Some("Store"));
    assert_eq!(defined_type("pub(crate) enum Kind {"), Some("Kind"));
    assert_eq!(defined_type("struct Wording<'a> {"), Some("Wording"));
    assert_eq!(defined_type("pub(in crate::x) struct Unit;"), Some("Unit"));
    assert_eq!(defined_type("let structure = 1;"), None);
}

#[test]
fn every_type_keeps_its_inherent_impl_in_the_file_that_defines_it() {
    let mut impls = 0;
    let mut strays = Vec::new();
    for (_, dir) in crates() {
        for (path, code) in production_sources(&dir) {
            let defined: Vec<&str> = code.lines().filter_map(defined_type).collect();
            for name in code.lines().filter_map(inherent_impl) {
                impls += 1;
                if !defined.contains(&name) {
                    strays.push(format!("{}: impl {name}", relative(&path)));
                }
            }
        }
    }
    assert!(impls >= 100, "the inherent impls are found: {impls}");
    assert!(
        strays.is_empty(),
        "inherent impls outside the file that defines their type (move the logic to free \
         functions, keep the methods beside the type):\n{}",
        strays.join("\n")
    );
}
