//! {{name}}: a berm program as a WebAssembly component, written with wit-bindgen against
//! `wit/world.wit`. `cargo build --release --target wasm32-wasip2` makes
//! target/wasm32-wasip2/release/{{module}}.wasm.

wit_bindgen::generate!({ path: "wit", world: "program", generate_all });

struct Program;

impl Guest for Program {
    fn hello(name: String) -> String {
        format!("hello, {name}")
    }
}

export!(Program);
