//! The explorer's entry point: `explorer::run()` mounts the Yew app on `<body>`.
fn main() {
    explorer::run();
}
