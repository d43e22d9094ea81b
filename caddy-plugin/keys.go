package weir

import (
	"net"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// keyKind says how a zone key is expanded per request.
type keyKind uint8

const (
	keyReplacer   keyKind = iota // anything else: Caddy's replacer (repl.ReplaceAll)
	keyConst                     // no placeholder: the text itself
	keyHeader                    // exactly {http.request.header.NAME}
	keyVar                       // exactly {http.vars.NAME} ({client_ip} in a Caddyfile)
	keyRemoteHost                // exactly {http.request.remote.host}
)

// zoneKey is a zone's key template, compiled when the zone is provisioned. The common keys
// made of one placeholder are read straight from the request — the value Caddy's replacer
// would give, without walking its providers and copying the value into a new string; every
// other template goes through the replacer.
type zoneKey struct {
	tmpl string
	kind keyKind
	arg  string // keyHeader: the canonical header name; keyVar: the variable's name
}

const (
	phHeaderPrefix = "http.request.header."
	phVarsPrefix   = "http.vars."
)

func compileKey(tmpl string) zoneKey {
	k := zoneKey{tmpl: tmpl}
	if !strings.ContainsAny(tmpl, "{}") {
		k.kind = keyConst
		return k
	}
	if len(tmpl) < 3 || tmpl[0] != '{' || tmpl[len(tmpl)-1] != '}' {
		return k
	}
	name := tmpl[1 : len(tmpl)-1]
	if strings.ContainsAny(name, "{}\\") {
		return k
	}
	switch {
	case strings.HasPrefix(name, phHeaderPrefix):
		k.kind, k.arg = keyHeader, textproto.CanonicalMIMEHeaderKey(name[len(phHeaderPrefix):])
	case strings.HasPrefix(name, phVarsPrefix):
		k.kind, k.arg = keyVar, name[len(phVarsPrefix):]
	case name == "http.request.remote.host":
		k.kind = keyRemoteHost
	}
	return k
}

// expand returns the key of request r, as repl.ReplaceAll(tmpl, "") would.
func (k *zoneKey) expand(r *http.Request, repl *caddy.Replacer) string {
	switch k.kind {
	case keyConst:
		return k.tmpl
	case keyHeader:
		// Caddy joins repeated header lines with ",".
		switch v := r.Header[k.arg]; len(v) {
		case 0:
			return ""
		case 1:
			return v[0]
		default:
			return strings.Join(v, ",")
		}
	case keyVar:
		switch v := caddyhttp.GetVar(r.Context(), k.arg).(type) {
		case nil:
			return ""
		case string:
			return v
		}
	case keyRemoteHost:
		if r.TLS != nil && !r.TLS.HandshakeComplete {
			return "" // Caddy does not trust the address before the handshake completes
		}
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			return host
		}
		return r.RemoteAddr // a unix socket path
	}
	if repl == nil {
		return k.tmpl
	}
	return repl.ReplaceAll(k.tmpl, "")
}

// isClientIP reports a key that is exactly the client address Caddy resolved ({client_ip}
// in a Caddyfile), which the engine reads as its own `ip` key part.
func (k *zoneKey) isClientIP() bool {
	return k.kind == keyVar && k.arg == caddyhttp.ClientIPVarKey
}
