//! A run that ends with a successful `result`: the envelope, and the command line,
//! environment and stdin coder gives the child.

mod common;

use common::{Fake, steps};
use serde_json::json;

#[test]
fn success_envelope_carries_result_and_session() {
    let fake = Fake::new(json!(steps::answer("all done")));
    let out = fake.coder().arg("fix the bug").run();
    out.assert_success("all done");
    let record = fake.record();
    assert_eq!(
        out.session_id(),
        record.flag_value("--session-id").as_deref(),
        "{}",
        out.explain()
    );
}
