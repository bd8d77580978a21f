//! What `berm attest verify --programs` relies on: compiling a program with berm's guest
//! engine settings is deterministic. The same program compiled twice, by separate engines,
//! with parallel compilation on (`Engine::new`) and off (`Engine::compile_only`, what
//! berm-vmm and the verifier use), gives byte-identical code.

use berm::{Engine, EngineConfig};

use berm_fixtures::example as program;

#[test]
fn compiling_a_program_twice_gives_the_same_code_with_parallel_compilation_on_and_off() {
    for name in ["notes", "compose"] {
        let wasm = program(name);
        let serial = Engine::compile_only(&EngineConfig::vm()).unwrap();
        let serial_again = Engine::compile_only(&EngineConfig::vm()).unwrap();
        let parallel = Engine::new(&EngineConfig::vm()).unwrap();
        let once = serial.precompile(&wasm).unwrap();
        let twice = serial_again.precompile(&wasm).unwrap();
        let in_parallel = parallel.precompile(&wasm).unwrap();
        assert_eq!(serial.fingerprint(), parallel.fingerprint());
        assert_eq!(once.file_name, in_parallel.file_name);
        assert!(
            once.bytes == twice.bytes,
            "{name}: two serial compiles differ"
        );
        assert!(
            once.bytes == in_parallel.bytes,
            "{name}: serial and parallel compiles differ"
        );
        // The same engine compiling again, too.
        assert!(serial.precompile(&wasm).unwrap().bytes == once.bytes);
    }
}
