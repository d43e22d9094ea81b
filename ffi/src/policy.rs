//! Policies: parse or load a policy, and describe its zones for hosts that place them.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;

use weir::policy::{CompiledPolicy, Engine};

use crate::{bytes, fail, give, guard, take_back, weir_error};
use crate::{WEIR_ERR_INVALID, WEIR_ERR_IO, WEIR_ERR_NULL, WEIR_ERR_POLICY, WEIR_OK};

/// A parsed, validated policy. Immutable; thread-safe.
pub struct weir_policy {
    pub(crate) policy: CompiledPolicy,
}

/// What a policy's zone needs (for hosts that place zones in shared memory).
#[repr(C)]
pub struct weir_zone_info {
    /// The zone's name (not NUL-terminated), valid as long as the policy.
    pub name: *const u8,
    pub name_len: usize,
    /// Region size in bytes.
    pub bytes: usize,
    /// Pass to `weir_zone_attach`; a reload that changes it is refused.
    pub schema: u64,
    /// For a `scope = "cluster"` zone: bytes of its shared cluster region (the other nodes'
    /// counts, what this node pushed, sync health and cluster stats), to give to
    /// `weir_engine_attach_shared` when several processes share the zone; 0 for a local zone.
    pub cluster_bytes: usize,
}

/// Parses a policy from `len` bytes of TOML at `text`. `name` (NUL-terminated, may be NULL)
/// names the source in error messages ("name:line:col: message"). On success stores a new
/// policy in `*out`.
#[no_mangle]
pub unsafe extern "C" fn weir_policy_parse(
    text: *const u8,
    len: usize,
    name: *const c_char,
    out: *mut *mut weir_policy,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return fail(err, WEIR_ERR_NULL, "out is NULL");
        }
        *out = ptr::null_mut();
        let src = match bytes(text, len) {
            Ok(b) => b,
            Err(code) => return fail(err, code, "policy text is NULL or too long"),
        };
        let name = if name.is_null() {
            None
        } else {
            CStr::from_ptr(name).to_str().ok()
        };
        let src = match weir::policy::config::policy_text(src, name) {
            Ok(s) => s,
            Err(e) => return fail(err, WEIR_ERR_POLICY, e),
        };
        match CompiledPolicy::parse(src, name) {
            Ok(policy) => give(out, weir_policy { policy }),
            Err(e) => fail(err, WEIR_ERR_POLICY, e),
        }
    })
}

/// Reads and parses a policy file (NUL-terminated path).
#[no_mangle]
pub unsafe extern "C" fn weir_policy_load(
    path: *const c_char,
    out: *mut *mut weir_policy,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if path.is_null() || out.is_null() {
            return fail(err, WEIR_ERR_NULL, "path or out is NULL");
        }
        *out = ptr::null_mut();
        let Ok(p) = CStr::from_ptr(path).to_str() else {
            return fail(err, WEIR_ERR_INVALID, "path is not valid UTF-8");
        };
        let text = match weir::policy::config::files::read_policy(std::path::Path::new(p)) {
            Ok(t) => t,
            Err(e) => return fail(err, WEIR_ERR_IO, format_args!("{p}: {e}")),
        };
        weir_policy_parse(text.as_ptr(), text.len(), path, out, err)
    })
}

/// Frees a policy (NULL is ignored). Engines made from it stay valid.
#[no_mangle]
pub unsafe extern "C" fn weir_policy_free(p: *mut weir_policy) {
    take_back(p)
}

/// Number of zones the policy declares (0 for NULL).
#[no_mangle]
pub unsafe extern "C" fn weir_policy_zone_count(p: *const weir_policy) -> usize {
    if p.is_null() {
        return 0;
    }
    (*p).policy.zones.len()
}

/// Describes zone `i` of the policy.
#[no_mangle]
pub unsafe extern "C" fn weir_policy_zone(
    p: *const weir_policy,
    i: usize,
    out: *mut weir_zone_info,
) -> c_int {
    guard(|| {
        if p.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let policy = &(*p).policy;
        let Some(z) = policy.zones.get(i) else {
            return WEIR_ERR_INVALID;
        };
        let layout = &Engine::layouts(policy)[i];
        *out = weir_zone_info {
            name: z.name.as_ptr(),
            name_len: z.name.len(),
            bytes: layout.bytes,
            schema: layout.schema,
            cluster_bytes: layout.cluster_bytes,
        };
        WEIR_OK
    })
}

/// Bytes of the shared counter block `weir_engine_attach` can take for this policy (0 for NULL).
#[no_mangle]
pub unsafe extern "C" fn weir_policy_counters_bytes(p: *const weir_policy) -> usize {
    if p.is_null() {
        return 0;
    }
    Engine::counters_layout(&(*p).policy).0
}

/// Index of variable `name` (`len` bytes) among the policy's `var:NAME` key parts, as
/// `weir_request.var` is asked for it (`weir_engine_var_name`); -1 when no key uses it or for
/// NULL.
#[no_mangle]
pub unsafe extern "C" fn weir_policy_var_index(
    p: *const weir_policy,
    name: *const u8,
    len: usize,
) -> i64 {
    let (Some(p), Ok(name)) = (p.as_ref(), bytes(name, len)) else {
        return -1;
    };
    let vars = &p.policy.vars;
    vars.iter()
        .position(|v| v.as_bytes() == name)
        .map_or(-1, |i| i as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_have_their_index() {
        let text = "[zones.l]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
            [[limit]]\nclass = \"*\"\nzone = \"l\"\nkey = \"var:tenant\"\n";
        let p = weir_policy {
            policy: CompiledPolicy::parse(text, None).unwrap(),
        };
        let index = |n: &str| unsafe { weir_policy_var_index(&p, n.as_ptr(), n.len()) };
        assert_eq!((index("tenant"), index("other")), (0, -1));
        assert_eq!(
            unsafe { weir_policy_var_index(ptr::null(), ptr::null(), 0) },
            -1
        );
    }
}
