//! Prints each role's allow list as a Markdown table row: what `docs/threat-model.md` shows.

#[cfg(target_os = "linux")]
fn main() {
    println!("| role | count | allowed |\n|---|---|---|");
    for role in berm_confine::Role::ALL {
        let allowed = role.describe();
        println!(
            "| {} | {} | {} |",
            role.name(),
            allowed.len(),
            allowed
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("the allow lists are Linux syscall tables; run this on Linux");
    std::process::exit(2);
}
