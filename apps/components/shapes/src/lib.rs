//! shapes: plane geometry as a WebAssembly component with plain WIT exports
//! (`wit/shapes.wit`), the way Wassette's examples are written. berm serves its three
//! functions as tools with schemas derived from the WIT types (a cargo build writes no
//! `package-docs` section, so the doc comments do not reach berm yet): no berm manifest.

wit_bindgen::generate!({ path: "wit", world: "shapes" });

struct Shapes;

impl Guest for Shapes {
    fn area(rect: Rect) -> Result<f64, String> {
        if rect.width < 0.0 || rect.height < 0.0 {
            return Err(format!(
                "a side is negative: width {}, height {}",
                rect.width, rect.height
            ));
        }
        Ok(rect.width * rect.height)
    }

    fn bounds(points: Vec<Point>, unit: Option<Unit>) -> Option<Rect> {
        let first = points.first()?;
        let (mut x0, mut y0, mut x1, mut y1) = (first.x, first.y, first.x, first.y);
        for p in &points {
            x0 = x0.min(p.x);
            y0 = y0.min(p.y);
            x1 = x1.max(p.x);
            y1 = y1.max(p.y);
        }
        Some(Rect {
            origin: Point { x: x0, y: y0 },
            width: x1 - x0,
            height: y1 - y0,
            unit,
        })
    }

    fn tiles(rect: Rect, tile: u32) -> Result<u32, String> {
        if tile == 0 {
            return Err("a tile's side must be at least 1".into());
        }
        let side = f64::from(tile);
        let count = (rect.width / side).ceil() * (rect.height / side).ceil();
        if !(0.0..=1_000_000.0).contains(&count) {
            return Err(format!("{count} tiles: more than 1000000"));
        }
        // In range and whole (ceil of non-negative values), so the cast is exact.
        Ok(count as u32)
    }
}

export!(Shapes);
