// Command caddy-weir is Caddy with the standard modules and weir, built without xcaddy. The
// tests build it with `-tags weirtest` (target/caddy/caddy-weirtest); `make caddy` builds the
// production binary with xcaddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/weir-rs/weir/caddy-plugin"
)

func main() {
	caddycmd.Main()
}
