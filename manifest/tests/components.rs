//! The JSON Schemas derived from WIT types (docs/components.md's table), on every type, checked
//! by a JSON Schema validator; and a component's docs read from its `package-docs` section.

use berm_manifest::Manifest;
use serde_json::{Value, json};
use wit_parser::{PackageMetadata, Resolve};

const PLAIN_WIT: &str = include_str!("../../apps/components/plain/wit/plain.wit");

/// The plain component's WIT, and its package.
fn plain() -> (Resolve, wit_parser::PackageId) {
    let mut resolve = Resolve::default();
    let package = resolve.push_str("plain.wit", PLAIN_WIT).unwrap();
    (resolve, package)
}

fn function<'a>(resolve: &'a Resolve, name: &str) -> &'a wit_parser::Function {
    resolve
        .interfaces
        .iter()
        .flat_map(|(_, i)| i.functions.values())
        .find(|f| f.name == name)
        .unwrap()
}

fn validator(schema: &Value) -> jsonschema::Validator {
    assert!(
        jsonschema::meta::is_valid(schema),
        "not a valid schema: {schema}"
    );
    jsonschema::validator_for(schema).unwrap()
}

/// A value of `everything` with every WIT type in it (as berm/tests/components.rs sends).
fn everything() -> Value {
    json!({
        "flag": true, "small": 255, "medium": 65535, "large": 4294967295u64,
        "huge": 18446744073709551615u64, "tiny": -128, "short": -32768, "int": -2147483648i64,
        "long": -9223372036854775808i64, "single": 1.5, "double": -2.25, "letter": "é",
        "text": "text", "items": [1, 2, 3], "pair": ["a", 7],
        "point": {"x": 1, "y": -1, "label": "here"}, "colour": "green",
        "access": ["read", "exec"],
        "shape": {"rect": [{"x": 0, "y": 0, "label": null}, {"x": 2, "y": 3}]},
        "maybe": 5, "maybe-maybe": {"some": null}, "outcome": {"err": "no"}, "bare": {"ok": null},
    })
}

#[test]
fn every_wit_type_has_the_schema_the_table_gives() {
    let (resolve, _) = plain();
    let echo = function(&resolve, "echo");
    let input = berm_manifest::schema::input_schema(&resolve, echo).unwrap();
    let fields = &input["properties"]["value"]["properties"];
    let int = |min: Value, max: Value| json!({"type": "integer", "minimum": min, "maximum": max});
    assert_eq!(fields["flag"], json!({"type": "boolean"}));
    assert_eq!(fields["small"], int(json!(0), json!(255)));
    assert_eq!(fields["medium"], int(json!(0), json!(65535)));
    assert_eq!(fields["large"], int(json!(0), json!(4294967295u64)));
    assert_eq!(
        fields["huge"],
        int(json!(0), json!(18446744073709551615u64))
    );
    assert_eq!(fields["tiny"], int(json!(-128), json!(127)));
    assert_eq!(fields["short"], int(json!(-32768), json!(32767)));
    assert_eq!(fields["int"], int(json!(-2147483648i64), json!(2147483647)));
    assert_eq!(fields["long"], int(json!(i64::MIN), json!(i64::MAX)));
    assert_eq!(fields["single"], json!({"type": "number"}));
    assert_eq!(fields["double"], json!({"type": "number"}));
    assert_eq!(
        fields["letter"],
        json!({"type": "string", "minLength": 1, "maxLength": 1})
    );
    assert_eq!(fields["text"], json!({"type": "string"}));
    assert_eq!(
        fields["items"],
        json!({"type": "array", "items": int(json!(0), json!(4294967295u64))})
    );
    assert_eq!(
        fields["pair"],
        json!({"type": "array", "prefixItems": [{"type": "string"}, int(json!(0), json!(65535))],
               "items": false, "minItems": 2, "maxItems": 2})
    );
    // A record: fields required but options, docs as descriptions.
    let point = &fields["point"];
    assert_eq!(point["description"], "A point on a plane.");
    assert_eq!(point["required"], json!(["x", "y"]));
    assert_eq!(point["additionalProperties"], json!(false));
    assert_eq!(point["properties"]["x"]["description"], "Across.");
    assert_eq!(
        fields["colour"],
        json!({"type": "string", "enum": ["red", "green", "blue"], "description": "A colour."})
    );
    assert_eq!(
        fields["access"],
        json!({"type": "array", "items": {"enum": ["read", "write", "exec"]}, "uniqueItems": true,
               "description": "Permissions."})
    );
    let cases = fields["shape"]["oneOf"].as_array().unwrap();
    assert_eq!(cases[0]["required"], json!(["circle"]));
    assert_eq!(cases[0]["description"], "A circle of this radius.");
    assert_eq!(cases[2]["const"], "empty");
    assert_eq!(
        fields["maybe"],
        json!({"anyOf": [int(json!(0), json!(4294967295u64)), {"type": "null"}]})
    );
    assert_eq!(
        fields["maybe-maybe"]["anyOf"][0]["required"],
        json!(["some"])
    );
    assert_eq!(
        fields["outcome"]["oneOf"][1]["properties"]["err"],
        json!({"type": "string"})
    );
    assert_eq!(
        fields["bare"]["oneOf"][0]["properties"]["ok"],
        json!({"type": "null"})
    );

    // The validator accepts what the runtime takes, and refuses what it would refuse.
    let valid = validator(&input);
    assert!(valid.is_valid(&json!({"value": everything()})));
    let refuse = |path: &str, value: Value| {
        let mut args = json!({"value": everything()});
        *args.pointer_mut(path).unwrap() = value.clone();
        assert!(!valid.is_valid(&args), "{path} = {value} passed");
    };
    refuse("/value/small", json!(256));
    refuse("/value/tiny", json!(-129));
    refuse("/value/huge", json!(-1));
    refuse("/value/int", json!(1.5));
    refuse("/value/letter", json!("ab"));
    refuse("/value/colour", json!("purple"));
    refuse("/value/access", json!(["read", "read"]));
    refuse("/value/shape", json!({"square": 1}));
    refuse("/value/pair", json!(["a", 7, 8]));
    refuse("/value/outcome", json!({"ok": 1, "err": "x"}));
    refuse("/value/point", json!({"x": 1}));
    refuse("/value/point", json!({"x": 1, "y": 2, "z": 3}));
    assert!(!valid.is_valid(&json!({})));

    // The output: `{"result": …}`, a top-level result's ok type.
    let divide = function(&resolve, "divide");
    let output = berm_manifest::schema::output_schema(&resolve, divide)
        .unwrap()
        .unwrap();
    let output = validator(&output);
    assert!(output.is_valid(&json!({"result": 3})));
    assert!(!output.is_valid(&json!({"result": "3"})));
    // An option parameter is not required.
    let nudge = function(&resolve, "nudge");
    let input = berm_manifest::schema::input_schema(&resolve, nudge).unwrap();
    assert_eq!(input["required"], json!(["p"]));
}

#[test]
fn a_component_without_a_manifest_takes_its_descriptions_from_package_docs() {
    let (resolve, package) = plain();
    let docs = PackageMetadata::extract(&resolve, package)
        .encode()
        .unwrap();
    let wasm = berm_fixtures::with_section(
        &berm_fixtures::component("plain"),
        PackageMetadata::SECTION_NAME,
        &docs,
    );
    let manifest = Manifest::from_image(&wasm).unwrap();
    manifest.check().unwrap();
    assert_eq!(
        manifest.tool("greet").unwrap().description,
        "Greets someone."
    );
    let echo = manifest.tool("shapes_echo").unwrap();
    assert_eq!(echo.description, "Returns what it is given.");
    assert_eq!(
        echo.input_schema["properties"]["value"]["description"],
        "Everything at once."
    );
    // Without the section the same tools come, undescribed.
    let bare = Manifest::from_image(&berm_fixtures::component("plain")).unwrap();
    assert_eq!(bare.tool("greet").unwrap().description, "");
    let shape = bare.component.as_ref().unwrap();
    assert!(
        shape.imports.iter().all(|i| i.grant.is_none()),
        "{:?}",
        shape.imports
    );
}

/// A component of world `w` of `wit`, with no manifest, from the core module `core` (WAT,
/// exporting `memory`, `cabi_realloc` and each function under its legacy-mangled name).
fn component_of(wit: &str, core: &str) -> Vec<u8> {
    let mut resolve = Resolve::default();
    let package = resolve.push_str("test.wit", wit).unwrap();
    let world = resolve.select_world(&[package], Some("w")).unwrap();
    let mut module = wat::parse_str(core).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .encode()
        .unwrap()
}

#[test]
fn componentize_pys_initializer_is_skipped_and_a_namesake_is_a_tool() {
    // Every componentize-py component exports `exports#init(app-name, symbols, stub-wasi)`,
    // which runs once at build time.
    let python = component_of(
        "package local:py;
         world w {
           export exports: interface {
             init: func(app-name: string, symbols: list<u8>, stub-wasi: bool);
           }
           export eval: func(expression: string) -> string;
         }",
        r#"(module
             (memory (export "memory") 1)
             (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) i32.const 8)
             (func (export "exports#init") (param i32 i32 i32 i32 i32))
             (func (export "eval") (param i32 i32) (result i32) i32.const 16))"#,
    );
    let manifest = Manifest::from_image(&python).unwrap();
    let tools: Vec<&str> = manifest.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["eval"]);
    assert_eq!(
        manifest.component.as_ref().unwrap().skipped,
        ["exports#init: componentize-py's build-time initializer, not a tool"]
    );
    // An `init` of another shape is the author's own tool.
    let own = component_of(
        "package local:mine;
         world w {
           export exports: interface {
             init: func(name: string);
           }
         }",
        r#"(module
             (memory (export "memory") 1)
             (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) i32.const 8)
             (func (export "exports#init") (param i32 i32)))"#,
    );
    let manifest = Manifest::from_image(&own).unwrap();
    let tools: Vec<&str> = manifest.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["exports_init"]);
}
