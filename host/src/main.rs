fn main() { println!("{}", runbook_host::module_sha256()); }
