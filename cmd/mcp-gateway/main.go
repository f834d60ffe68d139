// Command mcp-gateway is the MCP gateway sandlot's templates ship (in
// /usr/local/bin), run by E2B's SDKs in a sandbox created with `mcp`:
//
//	mcp-gateway --config '<json>'   prepare the servers, start the gateway, return once it serves
//	mcp-gateway serve ...           the gateway itself (started by the above)
//	mcp-gateway pull NAME...        Template.addMcpServer: refused (catalog servers)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	apimcp "github.com/sandlot-dev/sandlot/api/mcp"
	"github.com/sandlot-dev/sandlot/guest/mcpgateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "serve":
			return mcpgateway.ServeCommand(ctx, args[1:])
		case "pull":
			return fmt.Errorf("pull: the servers of Docker's MCP catalog are container images, and sandlot's " +
				"sandboxes run no container engine: configure \"github/<owner>/<repo>\" servers at Sandbox.create")
		}
	}
	fs := flag.NewFlagSet("mcp-gateway", flag.ContinueOnError)
	config := fs.String("config", "", "the servers, as JSON (what Sandbox.create's mcp option holds)")
	addr := fs.String("addr", fmt.Sprintf(":%d", apimcp.Port), "the address to serve on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config == "" {
		return fmt.Errorf("--config is required")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := mcpgateway.Start(ctx, []byte(*config), os.Getenv(apimcp.TokenEnv), self, *addr, mcpgateway.DefaultPaths, os.Stdout); err != nil {
		return err
	}
	fmt.Printf("mcp-gateway: serving on %s%s\n", *addr, apimcp.Path)
	return nil
}
