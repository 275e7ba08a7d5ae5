//! `cargo xtask tidy`: ARCHITECTURE.md's crate graph and command list against the workspace,
//! as rust-analyzer's tidy tests check its docs. The document states, between markers, every
//! workspace crate with the workspace crates it depends on, and `xtask`'s commands; this reads
//! each member's `Cargo.toml` and `xtask`'s clap definition and fails on any difference, so the
//! map cannot drift from the code. A test runs it, so `cargo test` (and CI) fails too.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Crate -> workspace crates it depends on (normal dependencies), sorted.
type Graph = BTreeMap<String, Vec<String>>;

pub fn run(root: &Path) -> Result<()> {
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md"))?;
    let mut problems = Vec::new();
    let (stated, actual) = (stated_graph(&doc)?, workspace_graph(root)?);
    for (name, deps) in &actual {
        match stated.get(name) {
            None => problems.push(format!("{name} is a workspace crate but not in the table")),
            Some(s) if s != deps => problems.push(format!(
                "{name}: the table says it depends on [{}], Cargo.toml on [{}]",
                s.join(", "),
                deps.join(", ")
            )),
            _ => {}
        }
    }
    for name in stated.keys().filter(|n| !actual.contains_key(*n)) {
        problems.push(format!("{name} is in the table but not a workspace crate"));
    }
    let stated_cmds = between(&doc, "xtask-commands")?
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let mut actual_cmds = crate::command_names();
    let mut sorted = stated_cmds.clone();
    sorted.sort();
    actual_cmds.sort();
    if sorted != actual_cmds {
        problems.push(format!(
            "xtask commands: the document lists [{}], xtask has [{}]",
            sorted.join(", "),
            actual_cmds.join(", ")
        ));
    }
    if !problems.is_empty() {
        bail!(
            "ARCHITECTURE.md disagrees with the workspace:\n  {}",
            problems.join("\n  ")
        );
    }
    println!(
        "ARCHITECTURE.md matches the workspace: {} crates, {} xtask commands",
        actual.len(),
        actual_cmds.len()
    );
    Ok(())
}

/// The text between `<!-- NAME:start -->` and `<!-- NAME:end -->`.
fn between<'a>(doc: &'a str, name: &str) -> Result<&'a str> {
    let (start, end) = (
        format!("<!-- {name}:start -->"),
        format!("<!-- {name}:end -->"),
    );
    let a = doc
        .find(&start)
        .with_context(|| format!("ARCHITECTURE.md has no {start}"))?;
    let b = doc[a..]
        .find(&end)
        .with_context(|| format!("ARCHITECTURE.md has no {end}"))?;
    Ok(&doc[a + start.len()..a + b])
}

fn stated_graph(doc: &str) -> Result<Graph> {
    let mut g = Graph::new();
    for line in between(doc, "crate-graph")?.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // `| crate | deps |` splits into ["", crate, deps, ""].
        if cells.len() != 4 || cells[1] == "crate" || cells[1].starts_with("---") {
            continue;
        }
        let mut deps: Vec<String> = cells[2]
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .collect();
        deps.sort();
        g.insert(cells[1].to_owned(), deps);
    }
    Ok(g)
}

fn workspace_graph(root: &Path) -> Result<Graph> {
    let mut manifests: Vec<_> = std::fs::read_dir(root.join("crates"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("Cargo.toml")))
        .filter(|p| p.is_file())
        .collect();
    manifests.push(root.join("xtask/Cargo.toml"));
    let mut g = Graph::new();
    for m in manifests {
        let text = std::fs::read_to_string(&m)?;
        let t: toml::Table = toml::from_str(&text).with_context(|| format!("{}", m.display()))?;
        let name = t["package"]["name"]
            .as_str()
            .with_context(|| format!("{}: no package name", m.display()))?
            .to_owned();
        let mut deps: Vec<String> = t
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|d| {
                d.keys()
                    .filter(|k| k.starts_with("planepack-"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        deps.sort();
        g.insert(name, deps);
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    #[test]
    fn architecture_md_matches_the_workspace() {
        super::run(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap();
    }
}
