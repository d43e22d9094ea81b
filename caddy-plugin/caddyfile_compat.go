package weir

import (
	"math"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// parseCompat reads the handler-wide subdirectives of caddy-ratelimit's directive
// (`distributed`, `storage`, `jitter`, `sweep_interval`, `disable_metrics`); anything else
// is an error naming its line.
func (h *Handler) parseCompat(d *caddyfile.Dispenser) error {
	switch d.Val() {
	case "disable_metrics":
		if d.NextArg() {
			return d.ArgErr()
		}
		h.DisableMetrics = true
	case "jitter":
		if !d.NextArg() {
			return d.ArgErr()
		}
		if h.Jitter != 0 {
			return d.Errf("weir: jitter given twice")
		}
		j, err := strconv.ParseFloat(d.Val(), 64)
		if err != nil || math.IsNaN(j) || j < 0 || j > maxJitter {
			return d.Errf("weir: invalid jitter %q: a fraction from 0 to %d (0.2 = up to 20%% more)", d.Val(), maxJitter)
		}
		h.Jitter = j
		if d.NextArg() {
			return d.ArgErr()
		}
	case "sweep_interval":
		if h.SweepInterval != 0 {
			return d.Errf("weir: sweep_interval given twice")
		}
		return durationArg(d, "sweep_interval", &h.SweepInterval)
	case "storage":
		if !d.NextArg() {
			return d.ArgErr()
		}
		if len(h.StorageRaw) > 0 {
			return d.Errf("weir: storage given twice")
		}
		// Read as Caddy reads a storage module, so that a config that names one it does not
		// have fails as it would with caddy-ratelimit; the module is not loaded.
		id := "caddy.storage." + d.Val()
		mod, err := caddyfile.UnmarshalModule(d, id)
		if err != nil {
			return err
		}
		if _, ok := mod.(caddy.StorageConverter); !ok {
			return d.Errf("weir: module %s is not a storage module", id)
		}
		h.StorageRaw = caddyconfig.JSONModuleObject(mod, "module", mod.(caddy.Module).CaddyModule().ID.Name(), nil)
	case "distributed":
		return h.parseDistributed(d)
	default:
		return d.Errf("weir: unknown subdirective %q (expected policy, zone, log_key, distributed, jitter, disable_metrics, storage or sweep_interval)", d.Val())
	}
	return nil
}

func (h *Handler) parseDistributed(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	if h.Distributed != nil {
		return d.Errf("weir: distributed given twice")
	}
	dist := new(Distributed)
	h.Distributed = dist
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		what := d.Val()
		if seen[what] {
			return d.Errf("weir: distributed: %s given twice", what)
		}
		seen[what] = true
		var err error
		switch what {
		case "read_interval":
			err = durationArg(d, what, &dist.ReadInterval)
		case "write_interval":
			err = durationArg(d, what, &dist.WriteInterval)
		case "purge_age":
			err = durationArg(d, what, &dist.PurgeAge)
		case "redis":
			// redis URL [URL…]: one server, or Redis Cluster seed nodes / Sentinels.
			if !d.NextArg() {
				return d.ArgErr()
			}
			dist.Redis = d.Val()
			dist.RedisNodes = d.RemainingArgs()
		case "password", "redis_mode", "sentinel_master", "tls_ca_file", "tls_cert_file", "tls_key_file":
			field := map[string]*string{
				"password": &dist.Password, "redis_mode": &dist.RedisMode,
				"sentinel_master": &dist.SentinelMaster, "tls_ca_file": &dist.TLSCAFile,
				"tls_cert_file": &dist.TLSCertFile, "tls_key_file": &dist.TLSKeyFile,
			}[what]
			if !d.NextArg() {
				return d.ArgErr()
			}
			*field = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		case "expected_nodes":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, perr := strconv.Atoi(d.Val())
			if perr != nil || n < 1 || n > maxJSONInt {
				return d.Errf("weir: distributed: invalid expected_nodes %q: a whole number, at least 1", d.Val())
			}
			dist.ExpectedNodes = n
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("weir: distributed: unknown setting %q (expected redis, password, redis_mode, sentinel_master, tls_ca_file, tls_cert_file, tls_key_file, expected_nodes, read_interval, write_interval or purge_age)", what)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// durationArg reads the one duration argument of setting `what` into dst.
func durationArg(d *caddyfile.Dispenser, what string, dst *caddy.Duration) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	v, err := caddy.ParseDuration(d.Val())
	if err != nil {
		return d.Errf("weir: invalid %s %q: %v", what, d.Val(), err)
	}
	*dst = caddy.Duration(v)
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}
