//! Prints each role's allow list as a Markdown table row: what `docs/threat-model.md` shows.

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
