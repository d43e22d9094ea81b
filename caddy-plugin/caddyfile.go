package weir

import (
	"fmt"
	"os"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("weir", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("weir", httpcaddyfile.Before, "basic_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var m Handler
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return &m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	weir [<matcher>] {
//	    policy <policy.toml>
//	    log_key
//	    disable_metrics
//	    jitter <fraction>
//	    sweep_interval <duration>      # accepted, no effect
//	    storage <module...>            # accepted, not used
//	    distributed {
//	        redis <url>
//	        password <password>
//	        expected_nodes <n>
//	        read_interval <duration>
//	        write_interval <duration>
//	        purge_age <duration>       # accepted, no effect
//	    }
//	    zone <name> {
//	        key         <placeholder or text>
//	        events      <n>            # exact sliding log (caddy-ratelimit's zones)
//	        window      <duration>
//	        ipv4_prefix <bits>
//	        ipv6_prefix <bits>
//	        match { <matchers> }
//	        rate 10r/s [burst <n>]     # GCRA (burst may also be its own line)
//	        max <n> [queue <n>] [timeout <duration>]   # concurrency
//	        max auto [bounds <min> <max>] [queue <n>] [timeout <duration>]   # learned limit
//	        status <code>
//	        size <bytes>               # or 64k, 10m, 1g
//	        log_level info|notice|warn|error
//	    }
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name (a matcher after it was taken by Caddy)
	if d.NextArg() {
		return d.Errf("weir: unexpected argument %q: write weir { policy <file> } (an argument starting with / is a path matcher)", d.Val())
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "policy":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if err := h.setPolicy(d); err != nil {
				return err
			}
			if d.NextArg() {
				return d.ArgErr()
			}
		case "log_key":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.LogKey = true
		case "zone":
			if err := h.parseZone(d); err != nil {
				return err
			}
		default:
			if err := h.parseCompat(d); err != nil {
				return err
			}
		}
	}
	if h.Policy == "" && len(h.RateLimits) == 0 {
		return d.Err("weir: give a policy file or at least one zone")
	}
	return nil
}

// setPolicy records the policy file and checks it now, so that `caddy adapt` reports a bad
// policy (weir's file:line:col message) together with the Caddyfile line that names it.
func (h *Handler) setPolicy(d *caddyfile.Dispenser) error {
	if h.Policy != "" {
		return d.Errf("weir: policy already specified: %s", h.Policy)
	}
	h.Policy = d.Val()
	text, err := os.ReadFile(h.Policy)
	if err != nil {
		return d.Errf("weir: reading policy: %v", err)
	}
	if err := checkPolicy(text, h.Policy); err != nil {
		return d.Errf("weir: %v", err)
	}
	return nil
}

func (h *Handler) parseZone(d *caddyfile.Dispenser) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	name := d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	if _, dup := h.RateLimits[name]; dup {
		return d.Errf("weir: zone %s defined twice", name)
	}
	z := new(Zone)
	// Each setting once (match excepted: its blocks add up): a repeat is an error at its line.
	seen := map[string]bool{}
	once := func(what string) error {
		if seen[what] {
			return d.Errf("weir: zone %s: %s given twice", name, what)
		}
		seen[what] = true
		return nil
	}
	intArg := func(what string, dst *int) error {
		if !d.NextArg() {
			return d.ArgErr()
		}
		if err := once(what); err != nil {
			return err
		}
		n, err := strconv.Atoi(d.Val())
		if err != nil {
			return d.Errf("weir: zone %s: invalid %s %q: expected a whole number", name, what, d.Val())
		}
		if n > maxJSONInt {
			return d.Errf("weir: zone %s: %s %d is too large", name, what, n)
		}
		*dst = n
		return nil
	}
	durArg := func(what string, dst *caddy.Duration) error {
		if !d.NextArg() {
			return d.ArgErr()
		}
		if err := once(what); err != nil {
			return err
		}
		v, err := caddy.ParseDuration(d.Val())
		if err != nil {
			return d.Errf("weir: zone %s: invalid %s %q: %v", name, what, d.Val(), err)
		}
		*dst = caddy.Duration(v)
		return nil
	}
	// A table size in the policy's syntax: bytes, or a number with k, m or g.
	sizeArg := func() error {
		if !d.NextArg() {
			return d.ArgErr()
		}
		if err := once("size"); err != nil {
			return err
		}
		n, err := parseSize(d.Val())
		if err == nil && n > maxZoneBytes {
			err = fmt.Errorf("size %s is too large: at most %d bytes (1 TiB)", d.Val(), maxZoneBytes)
		}
		if err == nil {
			z.Size = int(n)
			err = checkSize(z.Size, zoneMinBytes())
		}
		if err != nil {
			return d.Errf("weir: zone %s: %v", name, err)
		}
		if d.NextArg() {
			return d.ArgErr()
		}
		return nil
	}
	// "bounds MIN MAX": a learned limit's bounds.
	boundsArg := func() error {
		if err := once("bounds"); err != nil {
			return err
		}
		z.Bounds = make([]int, 2)
		for i := range z.Bounds {
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil || n > maxJSONInt {
				return d.Errf("weir: zone %s: invalid bounds %q: expected two whole numbers (bounds <min> <max>)", name, d.Val())
			}
			z.Bounds[i] = n
		}
		return nil
	}
	// Trailing "burst N" after rate, "bounds MIN MAX" / "queue N" / "timeout D" after max.
	trailing := func(allowed ...string) error {
		for d.NextArg() {
			kw := d.Val()
			ok := false
			for _, a := range allowed {
				ok = ok || a == kw
			}
			if !ok {
				return d.Errf("weir: zone %s: unexpected %q", name, kw)
			}
			var err error
			switch kw {
			case "burst":
				err = intArg("burst", &z.Burst)
			case "queue":
				err = intArg("queue", &z.Queue)
			case "timeout":
				err = durArg("timeout", &z.Timeout)
			case "bounds":
				err = boundsArg()
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch d.Val() {
		case "key":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if err := once("key"); err != nil {
				return err
			}
			z.Key = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "events":
			err = intArg("events", &z.MaxEvents)
		case "window":
			err = durArg("window", &z.Window)
		case "ipv4_prefix":
			err = intArg("ipv4_prefix", &z.IPv4Prefix)
		case "ipv6_prefix":
			err = intArg("ipv6_prefix", &z.IPv6Prefix)
		case "rate":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if err := once("rate"); err != nil {
				return err
			}
			if _, _, rerr := parseRate(d.Val()); rerr != nil {
				return d.Errf("weir: zone %s: %v", name, rerr)
			}
			z.Rate = d.Val()
			err = trailing("burst")
		case "burst":
			err = intArg("burst", &z.Burst)
		case "max":
			if d.NextArg() {
				if d.Val() == "auto" {
					if err = once("max"); err == nil {
						z.MaxAuto = true
						err = trailing("bounds", "queue", "timeout")
					}
					break
				}
				d.Prev()
			}
			if err = intArg("max", &z.Max); err == nil {
				err = trailing("queue", "timeout")
			}
		case "bounds":
			err = boundsArg()
		case "queue":
			err = intArg("queue", &z.Queue)
		case "timeout":
			err = durArg("timeout", &z.Timeout)
		case "status":
			err = intArg("status", &z.Status)
		case "size":
			err = sizeArg()
		case "log_level":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if err := once("log_level"); err != nil {
				return err
			}
			if _, lerr := parseLogLevel(d.Val()); lerr != nil {
				return d.Errf("weir: zone %s: %v", name, lerr)
			}
			z.LogLevel = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "scope":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if err := once("scope"); err != nil {
				return err
			}
			if v := d.Val(); v != "local" && v != "cluster" {
				return d.Errf("weir: zone %s: unknown scope %q (expected local or cluster)", name, v)
			}
			z.Scope = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "match":
			ms, merr := caddyhttp.ParseCaddyfileNestedMatcherSet(d)
			if merr != nil {
				return merr
			}
			z.MatcherSetsRaw = append(z.MatcherSetsRaw, ms)
		default:
			return d.Errf("weir: zone %s: unknown setting %q", name, d.Val())
		}
		if err != nil {
			return err
		}
	}
	if _, err := zoneParamsOf(name, z); err != nil {
		return d.Errf("weir: %v", err)
	}
	if h.RateLimits == nil {
		h.RateLimits = map[string]*Zone{}
	}
	h.RateLimits[name] = z
	return nil
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
