package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Stop pauses the guest's vCPUs (QMP stop).
func (m *Monitor) Stop(ctx context.Context) error { return m.Execute(ctx, "stop", nil, nil) }

// Cont resumes the guest's vCPUs (QMP cont).
func (m *Monitor) Cont(ctx context.Context) error { return m.Execute(ctx, "cont", nil, nil) }

// Status returns query-status: whether vCPUs run, and QEMU's run state, e.g.
// "prelaunch" (-S, never run), "running", "paused", "inmigrate",
// "postmigrate" (source after a completed migration).
func (m *Monitor) Status(ctx context.Context) (running bool, status string, err error) {
	var st struct {
		Running bool   `json:"running"`
		Status  string `json:"status"`
	}
	if err := m.Execute(ctx, "query-status", nil, &st); err != nil {
		return false, "", err
	}
	return st.Running, st.Status, nil
}

// Quit asks QEMU to exit and waits until it closed the monitor socket. QEMU
// may exit before its reply is read; that counts as success.
func (m *Monitor) Quit(ctx context.Context) error {
	err := m.Execute(ctx, "quit", nil, nil)
	if err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("quit: waiting for QEMU to close the monitor: %w", context.Cause(ctx))
	}
}

// SetMigrationCapabilities sets migration capabilities, e.g.
// {"x-ignore-shared": true}. In QEMU 7.2 x-ignore-shared can only be set this
// way (there is no -global for it), which is why clones use -incoming defer.
func (m *Monitor) SetMigrationCapabilities(ctx context.Context, caps map[string]bool) error {
	if len(caps) == 0 {
		return nil
	}
	type capState struct {
		Capability string `json:"capability"`
		State      bool   `json:"state"`
	}
	list := make([]capState, 0, len(caps))
	for _, name := range slices.Sorted(maps.Keys(caps)) { // stable order for logs and tests
		list = append(list, capState{Capability: name, State: caps[name]})
	}
	args := map[string]any{"capabilities": list}
	return m.Execute(ctx, "migrate-set-capabilities", args, nil)
}

// MigrationCapabilities returns query-migrate-capabilities as name → state.
func (m *Monitor) MigrationCapabilities(ctx context.Context) (map[string]bool, error) {
	var list []struct {
		Capability string `json:"capability"`
		State      bool   `json:"state"`
	}
	if err := m.Execute(ctx, "query-migrate-capabilities", nil, &list); err != nil {
		return nil, err
	}
	caps := make(map[string]bool, len(list))
	for _, c := range list {
		caps[c.Capability] = c.State
	}
	return caps, nil
}

// SetMigrationParameters runs migrate-set-parameters with params as its
// arguments. Names are QEMU 7.2's, e.g. "max-bandwidth" (bytes/s, default
// 128 MiB/s, which throttles full-RAM snapshots), "downtime-limit", and the
// self-announce timers "announce-initial", "announce-max", "announce-rounds",
// "announce-step" (ms; announce-rounds 0 disables the RARP announcements).
func (m *Monitor) SetMigrationParameters(ctx context.Context, params map[string]any) error {
	if len(params) == 0 {
		return nil // a nil map would be sent as "arguments": null, which QEMU rejects
	}
	return m.Execute(ctx, "migrate-set-parameters", params, nil)
}

// MigrationParameters returns query-migrate-parameters. Numbers come back as
// json.Number so that 64-bit values such as max-bandwidth stay exact.
func (m *Monitor) MigrationParameters(ctx context.Context) (map[string]any, error) {
	var raw json.RawMessage
	if err := m.Execute(ctx, "query-migrate-parameters", nil, &raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var params map[string]any
	if err := dec.Decode(&params); err != nil {
		return nil, fmt.Errorf("query-migrate-parameters: decode: %w", err)
	}
	return params, nil
}

// Migrate starts an outgoing migration to uri, which must be "fd:NAME" for a
// descriptor passed with SendFD. It returns once QEMU started the migration;
// use WaitMigration for the outcome.
func (m *Monitor) Migrate(ctx context.Context, uri string) error {
	if err := checkFDURI(uri); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return m.Execute(ctx, "migrate", map[string]string{"uri": uri}, nil)
}

// MigrateIncoming starts loading a migration stream into a QEMU started with
// -incoming defer. uri must be "fd:NAME" for a descriptor passed with SendFD.
func (m *Monitor) MigrateIncoming(ctx context.Context, uri string) error {
	if err := checkFDURI(uri); err != nil {
		return fmt.Errorf("migrate-incoming: %w", err)
	}
	return m.Execute(ctx, "migrate-incoming", map[string]string{"uri": uri}, nil)
}

// checkFDURI enforces sandlot's rule that migration only uses passed fds:
// "exec:" would make QEMU run a shell, and tcp:/unix: are not needed.
func checkFDURI(uri string) error {
	name, ok := strings.CutPrefix(uri, "fd:")
	if !ok || name == "" {
		return fmt.Errorf("only fd:NAME migration URIs are supported, got %q", uri)
	}
	return nil
}
