//! Generates weir.h into OUT_DIR; `make header` copies it to include/weir.h and
//! tests/header.rs fails when the committed header is stale.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("weir.h");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    // The shared library's soname, libweir.so.MAJOR (libweir.so.0.MINOR before 1.0: a 0.x
    // release may break the ABI at each minor version). `make lib` links that name to
    // target/release/libweir.so; scripts/install.sh installs libweir.so.VERSION with it.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let major = env!("CARGO_PKG_VERSION_MAJOR");
        let abi = match major {
            "0" => format!("0.{}", env!("CARGO_PKG_VERSION_MINOR")),
            _ => major.to_string(),
        };
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libweir.so.{abi}");
    }
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .expect("generating weir.h")
        .write_to_file(out);
}
