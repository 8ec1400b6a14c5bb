use super::*;

const FLOW: &str = r#"
[[step]]
name = "prep"
command = ["./prep.sh"]

[[step]]
name = "train"
count = 4
command = ["./train.sh"]
needs = ["prep"]
[step.resources]
cpus = 2.0

[[step]]
name = "eval"
count = 4
command = ["./eval.sh"]
each = "train"

[[step]]
name = "publish"
command = ["./publish.sh"]
needs = ["eval"]
needs_any = ["train"]
after = [7]
max_running = 1
"#;

fn refused(text: &str) -> SpecFileError {
    parse_flow_file("flow.toml", text)
        .and_then(|f| f.to_flow("u"))
        .expect_err("must be refused")
}

#[test]
fn the_documented_kind_of_flow_parses_with_its_job_keys_and_edges() {
    let flow = parse_flow_file("flow.toml", FLOW)
        .expect("parse")
        .to_flow("alice")
        .expect("flow");
    let names: Vec<&str> = flow.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["prep", "train", "eval", "publish"]);
    let train = &flow.steps[1];
    assert_eq!(train.spec.name, "train");
    assert_eq!(train.spec.user, "alice");
    assert_eq!(train.spec.count, 4);
    assert_eq!(train.spec.resources.cpu_milli, 2000);
    assert_eq!(train.needs, ["prep"]);
    assert_eq!(flow.steps[2].each.as_deref(), Some("train"));
    let publish = &flow.steps[3];
    assert_eq!(publish.needs_any, ["train"]);
    assert_eq!(publish.spec.after, [crate::JobId(7)]);
    assert_eq!(publish.spec.max_running, Some(1));
    assert_eq!(flow.order(), Ok(vec![0, 1, 2, 3]));
}

#[test]
fn a_cycle_is_refused_naming_file_line_and_the_steps_in_order() {
    let text = "[[step]]\nname = \"prep\"\ncommand = [\"true\"]\nneeds = [\"train\"]\n\n\
                [[step]]\nname = \"train\"\ncommand = [\"true\"]\nneeds = [\"prep\"]\n";
    let e = refused(text);
    assert_eq!(e.message, "cycle: prep → train → prep");
    assert_eq!((e.file.as_str(), e.line), ("flow.toml", 2));
    assert!(
        e.to_string().starts_with("flow.toml:2:8: cycle: prep"),
        "{e}"
    );
    // A longer one, entered from a step outside it, and a step following itself.
    let text = "[[step]]\nname = \"a\"\ncommand = [\"true\"]\n\
                [[step]]\nname = \"b\"\ncommand = [\"true\"]\nneeds = [\"a\", \"d\"]\n\
                [[step]]\nname = \"c\"\ncommand = [\"true\"]\nneeds = [\"b\"]\n\
                [[step]]\nname = \"d\"\ncommand = [\"true\"]\nneeds_any = [\"c\"]\n";
    assert_eq!(refused(text).message, "cycle: b → c → d → b");
    let e = refused("[[step]]\nname = \"x\"\ncommand = [\"true\"]\nneeds_fail = [\"x\"]\n");
    assert_eq!(e.message, "cycle: x → x");
}

#[test]
fn unknown_and_duplicate_names_are_refused_at_their_step() {
    let e = refused(
        "[[step]]\nname = \"prep\"\ncommand = [\"true\"]\n\n\
         [[step]]\nname = \"train\"\ncommand = [\"true\"]\nneeds = [\"perp\"]\n",
    );
    assert_eq!(e.message, "needs names an unknown step \"perp\"");
    assert_eq!(e.line, 6);
    let e = refused(
        "[[step]]\nname = \"a\"\ncommand = [\"true\"]\n[[step]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    assert_eq!(e.message, "step name \"a\" is used twice");
    assert_eq!(e.line, 5);
    let e = refused("[[step]]\ncommand = [\"true\"]\n");
    assert!(e.message.contains("no name"), "{e}");
    assert_eq!(e.line, 2);
    assert!(refused("").message.contains("at least one"));
}

#[test]
fn each_needs_equal_counts() {
    let e = refused(
        "[[step]]\nname = \"a\"\ncount = 2\ncommand = [\"true\"]\n\
         [[step]]\nname = \"b\"\ncount = 3\ncommand = [\"true\"]\neach = \"a\"\n",
    );
    assert!(e.message.contains("counts must match"), "{e}");
    assert_eq!(e.line, 6);
}

#[test]
fn bad_job_keys_are_located_as_in_a_spec_file() {
    let e = parse_flow_file(
        "f.toml",
        "[[step]]\nname = \"a\"\ncommand = [\"true\"]\n[step.resources]\ncpus = \"lots\"\n",
    )
    .expect_err("bad cpus");
    assert_eq!(e.field.as_deref(), Some("step[0].resources.cpus"));
    // The table the bad key is in (its `[step.resources]` header); the field says which.
    assert_eq!(e.line, 4);
    let e = parse_flow_file("f.toml", "[[step]]\nname = \"a\"\n\ncomand = [\"true\"]\n")
        .expect_err("typo");
    assert!(e.message.contains("comand"), "{e}");
    assert_eq!(e.line, 4);
    let e = parse_flow_file("f.toml", "[[step]]\nname = \"a\"\nneeds = \"b\"\n")
        .expect_err("needs not a list");
    assert_eq!(e.line, 3);
    let e = parse_flow_file("f.toml", "[[stp]]\nname = \"a\"\n").expect_err("not a step");
    assert!(e.message.contains("stp"), "{e}");
    let e = refused("[[step]]\nname = \"a\"\n");
    assert!(e.message.contains("no command"), "{e}");
}

#[test]
fn steps_are_ordered_after_what_they_follow_whatever_the_file_order() {
    let flow = parse_flow_file(
        "f.toml",
        "[[step]]\nname = \"last\"\ncommand = [\"true\"]\nneeds = [\"first\"]\n\
         [[step]]\nname = \"first\"\ncommand = [\"true\"]\n",
    )
    .and_then(|f| f.to_flow("u"))
    .expect("flow");
    assert_eq!(flow.order(), Ok(vec![1, 0]));
    let spec = flow.resolved(0, |n| (n == "first").then_some(crate::JobId(40)));
    assert_eq!(spec.after, [crate::JobId(40)]);
}

#[test]
fn a_step_may_run_its_image_without_a_command() {
    let text = "[[step]]\nname = \"serve\"\nimage = \"oci:/srv/images/bb\"\n\n\
                [[step]]\nname = \"nothing\"\nneeds = [\"serve\"]\n";
    let e = refused(text);
    assert!(e.message.contains("image = \"REF\""), "{e}");
    let ok = parse_flow_file(
        "flow.toml",
        &text.replace("needs", "command = [\"true\"]\nneeds"),
    )
    .expect("parse")
    .to_flow("u")
    .expect("flow");
    assert_eq!(
        ok.steps[0].spec.image.as_deref(),
        Some("oci:/srv/images/bb")
    );
    assert!(ok.steps[0].spec.command.is_empty());
}
