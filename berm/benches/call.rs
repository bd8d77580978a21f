//! What a call costs: `echo.echo` through the runtime, against raw Wasmtime
//! pooling instantiation of an empty function as the baseline measured in
//! the same run; deploy from the compiled-code cache; cold compile.
//!
//! Run with `cargo bench -p berm` (build the example programs first:
//! scripts/build-apps.sh). Numbers go to docs/perf.md.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use berm::{Berm, Engine, EngineConfig, call};
use criterion::{Criterion, criterion_group, criterion_main};

use berm_fixtures::example as app;

fn calls(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = Engine::new(&EngineConfig::default()).unwrap();
    let berm = Berm::new(&engine, call::DEFAULT_CALL_DEPTH, vec![]);
    berm.deploy("echo", &app("echo")).unwrap();

    // Baseline: what Wasmtime itself needs to instantiate a module from a
    // pooling InstancePre, call an empty export and drop the store.
    let mut config = wasmtime::Config::new();
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(
        wasmtime::PoolingAllocationConfig::default(),
    ));
    let raw_engine = wasmtime::Engine::new(&config).unwrap();
    let empty =
        wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "f")))"#).unwrap();
    let module = wasmtime::Module::new(&raw_engine, empty).unwrap();
    let pre = wasmtime::Linker::<()>::new(&raw_engine)
        .instantiate_pre(&module)
        .unwrap();

    let mut group = c.benchmark_group("call");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("baseline: wasmtime pooling instantiate + empty call", |b| {
        b.iter(|| {
            let mut store = wasmtime::Store::new(&raw_engine, ());
            let instance = pre.instantiate(&mut store).unwrap();
            let f = instance.get_typed_func::<(), ()>(&mut store, "f").unwrap();
            f.call(&mut store, ()).unwrap();
        })
    });
    let args = br#"{"message":"hello"}"#;
    group.bench_function("echo.echo (instantiate + run + drop)", |b| {
        b.iter(|| {
            runtime
                .block_on(berm.call(None, "echo", "echo", args.to_vec()))
                .unwrap()
                .unwrap()
        })
    });
    group.finish();
}

fn deploys(c: &mut Criterion) {
    let engine = Engine::new(&EngineConfig::default()).unwrap();
    let echo = app("echo");
    let dir = tempfile::tempdir().unwrap();
    Berm::with_code_cache(&engine, call::DEFAULT_CALL_DEPTH, vec![], dir.path().into())
        .deploy("echo", &echo)
        .unwrap();

    let mut group = c.benchmark_group("deploy");
    group.bench_function("echo from the on-disk compiled-code cache", |b| {
        b.iter(|| {
            let berm =
                Berm::with_code_cache(&engine, call::DEFAULT_CALL_DEPTH, vec![], dir.path().into());
            let deployed = berm.deploy("echo", &echo).unwrap();
            assert_eq!(deployed.source, berm::CompileSource::DiskCache);
        })
    });
    let warm = Berm::new(&engine, call::DEFAULT_CALL_DEPTH, vec![]);
    warm.deploy("echo", &echo).unwrap();
    group.bench_function("echo already compiled in this process", |b| {
        b.iter(|| warm.deploy("again", &echo).unwrap())
    });
    group.sample_size(10);
    group.bench_function("echo cold compile", |b| {
        b.iter(|| {
            let berm = Berm::new(&engine, call::DEFAULT_CALL_DEPTH, vec![]);
            let deployed = berm.deploy("echo", &echo).unwrap();
            assert_eq!(deployed.source, berm::CompileSource::Compiled);
        })
    });
    group.finish();
}

criterion_group!(benches, calls, deploys);
criterion_main!(benches);
