//! `memspin-loadgen`: see `memspin-loadgen --help` and `loadgen/README.md`.

fn main() -> std::process::ExitCode {
    loadgen::cli::main()
}
