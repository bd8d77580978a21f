//! Plain exports and no berm manifest: berm derives the tools from the WIT.

wit_bindgen::generate!({ path: "wit", world: "plain" });

use exports::local::plain::shapes::{Everything, Guest as Shapes, Point};

struct Plain;

impl Guest for Plain {
    fn greet(name: String) -> String {
        format!("hello, {name}")
    }
}

impl Shapes for Plain {
    fn echo(value: Everything) -> Everything {
        value
    }

    fn divide(a: i64, b: i64) -> Result<i64, String> {
        a.checked_div(b)
            .ok_or_else(|| "cannot divide by zero".to_string())
    }

    fn nudge(p: Point, by: Option<Point>) -> Point {
        let by = by.unwrap_or(Point {
            x: 1,
            y: 0,
            label: None,
        });
        Point {
            x: p.x + by.x,
            y: p.y + by.y,
            label: p.label,
        }
    }
}

export!(Plain);
