//! Classes: request shapes, globs, regexes and value matchers.

use super::*;

pub(super) fn compile_class(cx: &mut Cx<'_>, name: &str, c: &Spanned<ClassSpec>) -> Class {
    let shapes_spec = &c.get_ref().shapes;
    if shapes_spec.get_ref().is_empty() {
        cx.err(
            &shapes_spec.span(),
            format!("{name:?} has an empty `match` list; add at least one entry like {{ path_prefix = \"/api/\" }}"),
        );
    }
    let shapes = shapes_spec
        .get_ref()
        .iter()
        .map(|s| compile_shape(cx, s))
        .collect();
    Class {
        name: name.to_owned(),
        shapes,
    }
}

/// A `lane` value: `critical`, `normal` or `sheddable`.
pub(super) fn compile_lane(cx: &mut Cx<'_>, v: &Spanned<String>) -> Option<Lane> {
    let lane = Lane::parse(v.get_ref());
    if lane.is_none() {
        cx.err(
            &v.span(),
            format!(
                "unknown lane {:?}; expected \"critical\" (health checks, admins: counted, never queued behind others, may use reserved slots), \"normal\" or \"sheddable\" (shed first)",
                v.get_ref()
            ),
        );
    }
    lane
}

pub(super) fn compile_regex(
    cx: &mut Cx<'_>,
    s: &str,
    span: &Range<usize>,
) -> Option<regex::bytes::Regex> {
    match regex::bytes::RegexBuilder::new(s)
        .size_limit(1 << 20)
        .build()
    {
        Ok(r) => Some(r),
        Err(e) => {
            let detail = e.to_string();
            let last = detail.lines().last().unwrap_or("").trim();
            let last = last.strip_prefix("error: ").unwrap_or(last);
            cx.err(span, format!("invalid regex {s:?}: {last}"));
            None
        }
    }
}

pub(super) fn compile_glob(cx: &mut Cx<'_>, s: &str, span: &Range<usize>) -> Option<Glob> {
    glob_or_err(cx, Glob::new(s), span)
}

pub(super) fn compile_iglob(cx: &mut Cx<'_>, s: &str, span: &Range<usize>) -> Option<Glob> {
    glob_or_err(cx, Glob::new_ignore_case(s), span)
}

pub(super) fn glob_or_err(
    cx: &mut Cx<'_>,
    g: Result<Glob, String>,
    span: &Range<usize>,
) -> Option<Glob> {
    match g {
        Ok(g) => Some(g),
        Err(e) => {
            cx.err(span, e);
            None
        }
    }
}

pub(super) fn compile_shape(cx: &mut Cx<'_>, s: &Spanned<ShapeSpec>) -> Shape {
    let spec = s.get_ref();
    let mut shape = Shape::default();
    let mut any = false;

    if let Some(list) = &spec.method {
        any = true;
        if nonempty_list(cx, list, "method") {
            for (m, span) in items(list) {
                if !is_token(m) {
                    cx.err(
                        &span,
                        format!("invalid method {m:?}; expected a token like \"GET\""),
                    );
                } else if m.bytes().any(|b| b.is_ascii_lowercase())
                    && m.bytes().all(|b| b.is_ascii_alphabetic())
                {
                    cx.err(
                        &span,
                        format!(
                            "methods are case-sensitive; did you mean {:?}?",
                            m.to_ascii_uppercase()
                        ),
                    );
                } else {
                    shape.methods.push(m.as_bytes().into());
                }
            }
        }
    }

    type Mk = fn(&mut Cx<'_>, &str, &Range<usize>) -> Option<PathTest>;
    let path_fields: [(&str, &Option<Spanned<StrList>>, Mk); 5] = [
        ("path", &spec.path, |cx, v, span| {
            if !v.starts_with('/') {
                cx.err(
                    span,
                    format!("path {v:?} must start with '/'; use path_glob for patterns"),
                );
                return None;
            }
            Some(PathTest::Exact(v.as_bytes().into()))
        }),
        ("path_prefix", &spec.path_prefix, |cx, v, span| {
            if !v.starts_with('/') {
                cx.err(span, format!("path_prefix {v:?} must start with '/'"));
                return None;
            }
            Some(PathTest::Prefix(v.as_bytes().into()))
        }),
        ("path_glob", &spec.path_glob, |cx, v, span| {
            compile_glob(cx, v, span).map(PathTest::Glob)
        }),
        ("path_iglob", &spec.path_iglob, |cx, v, span| {
            compile_iglob(cx, v, span).map(PathTest::Glob)
        }),
        ("path_regex", &spec.path_regex, |cx, v, span| {
            compile_regex(cx, v, span).map(PathTest::Regex)
        }),
    ];
    for (field, list, mk) in path_fields {
        let Some(list) = list else { continue };
        any = true;
        if nonempty_list(cx, list, field) {
            let alts: Vec<PathTest> = items(list)
                .filter_map(|(v, span)| mk(cx, v, &span))
                .collect();
            shape.path.push(alts.into_boxed_slice());
        }
    }

    if let Some(list) = &spec.client {
        any = true;
        if nonempty_list(cx, list, "client") {
            let mut set = CidrSet::new();
            for (v, span) in items(list) {
                if let Err(e) = set.push_entry(v) {
                    cx.err(&span, e);
                }
            }
            shape.client = Some(set);
        }
    }

    let maps = [
        ("header", &spec.header),
        ("cookie", &spec.cookie),
        ("query", &spec.query),
        ("var", &spec.var),
    ];
    for (kind, map) in maps {
        let Some(map) = map else { continue };
        any = true;
        for (name, v) in map {
            let n = name.get_ref();
            let key: Box<[u8]> = match kind {
                "header" => {
                    if !is_token(n) || n.len() > 255 {
                        cx.err(&name.span(), format!("invalid header name {n:?}"));
                        continue;
                    }
                    n.to_ascii_lowercase().into_bytes().into()
                }
                "cookie" | "var" => {
                    if !is_token(n) || n.len() > 255 {
                        let what = if kind == "var" { "variable" } else { kind };
                        cx.err(&name.span(), format!("invalid {what} name {n:?}"));
                        continue;
                    }
                    n.as_bytes().into()
                }
                _ => {
                    if n.is_empty() {
                        cx.err(&name.span(), "empty query argument name");
                        continue;
                    }
                    n.as_bytes().into()
                }
            };
            if let Some(m) = compile_value(cx, v) {
                match kind {
                    "header" => shape.headers.push((key, m)),
                    "cookie" => shape.cookies.push((key.into(), m)),
                    // The index is given once every class and limit is compiled.
                    "var" => shape.vars.push((key, 0, m)),
                    _ => shape.query.push((key, m)),
                }
            }
        }
    }

    if !any {
        cx.err(
            &s.span(),
            "empty match entry would match every request; list at least one of method, path, path_prefix, path_glob, path_iglob, path_regex, query, header, cookie, var, client (for every request use class = \"*\" in the limit)",
        );
    }
    shape
}

pub(super) fn compile_value(cx: &mut Cx<'_>, v: &Spanned<ValueSpec>) -> Option<ValueMatcher> {
    let spec = v.get_ref();
    let n = spec.present.is_some() as u8
        + spec.equals.is_some() as u8
        + spec.glob.is_some() as u8
        + spec.iglob.is_some() as u8
        + spec.regex.is_some() as u8;
    if n != 1 {
        cx.err(
            &v.span(),
            "expected exactly one of `present = true|false`, `equals = \"…\"`, `glob = \"…\"`, `iglob = \"…\"` or `regex = \"…\"`",
        );
        return None;
    }
    if let Some(p) = spec.present {
        return Some(if p {
            ValueMatcher::Present
        } else {
            ValueMatcher::Absent
        });
    }
    if let Some(e) = &spec.equals {
        return Some(ValueMatcher::Equals(e.get_ref().as_bytes().into()));
    }
    if let Some(g) = &spec.glob {
        return compile_glob(cx, g.get_ref(), &g.span()).map(ValueMatcher::Glob);
    }
    if let Some(g) = &spec.iglob {
        return compile_iglob(cx, g.get_ref(), &g.span()).map(ValueMatcher::Glob);
    }
    let r = spec.regex.as_ref()?;
    compile_regex(cx, r.get_ref(), &r.span()).map(ValueMatcher::Regex)
}
