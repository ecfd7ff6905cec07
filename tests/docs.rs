//! The examples in docs/sql.md are sqllogictest blocks; run them all, in order, on one
//! server, so the reference cannot drift from what Weir does.

use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_reference_examples() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sql.md");
    let text = std::fs::read_to_string(&path).expect("docs/sql.md");
    // keep line numbers: blank out everything outside ```slt fences
    let mut script = String::new();
    let mut inside = false;
    let mut blocks = 0;
    for line in text.lines() {
        if line.trim_start().starts_with("```slt") {
            inside = true;
            blocks += 1;
        } else if inside && line.trim_start().starts_with("```") {
            inside = false;
        } else if inside {
            script.push_str(line);
        }
        script.push('\n');
    }
    assert!(
        blocks >= 5,
        "docs/sql.md should hold its examples as ```slt blocks"
    );
    let out = std::env::temp_dir().join(format!("weir-docs-{}.slt", std::process::id()));
    std::fs::write(&out, script).expect("write script");
    let result = crate::slt::run_file(&out).await;
    let _ = std::fs::remove_file(&out);
    if let Err(e) = result {
        panic!("docs/sql.md: {e}");
    }
}
