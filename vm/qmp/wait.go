package qmp

import (
	"context"
	"fmt"
	"time"
)

// MigrationInfo is the part of query-migrate that sandlot uses. On the
// destination QEMU reports only Status (and ErrorDesc).
type MigrationInfo struct {
	// Status is "" before any migration, then e.g. "setup", "active",
	// "completed", "failed" or "cancelled".
	Status      string        `json:"status"`
	ErrorDesc   string        `json:"error-desc"`
	TotalTimeMs int64         `json:"total-time"`
	DowntimeMs  int64         `json:"downtime"`
	SetupTimeMs int64         `json:"setup-time"`
	RAM         *MigrationRAM `json:"ram"`
}

// MigrationRAM is query-migrate's "ram" member (source side).
type MigrationRAM struct {
	Transferred int64   `json:"transferred"` // bytes written to the stream for RAM
	Remaining   int64   `json:"remaining"`
	Total       int64   `json:"total"`
	Duplicate   int64   `json:"duplicate"` // zero pages, sent as a flag only
	Normal      int64   `json:"normal"`    // pages sent in full
	NormalBytes int64   `json:"normal-bytes"`
	Mbps        float64 `json:"mbps"`
}

const (
	migrationPollMin = time.Millisecond // snapshots complete in ~10 ms: poll tightly first
	migrationPollMax = 20 * time.Millisecond
)

// QueryMigration returns one query-migrate result.
func (m *Monitor) QueryMigration(ctx context.Context) (MigrationInfo, error) {
	var info MigrationInfo
	err := m.Execute(ctx, "query-migrate", nil, &info)
	return info, err
}

// WaitMigration polls query-migrate (every 1 ms, backing off to 20 ms) until
// the migration on this side is "completed". "failed" or "cancelled" return
// a *MigrationError carrying QEMU's error-desc. Any other status, including
// none yet, keeps polling until ctx ends or the monitor closes (ErrClosed).
func (m *Monitor) WaitMigration(ctx context.Context) (MigrationInfo, error) {
	delay := migrationPollMin
	for {
		info, err := m.QueryMigration(ctx)
		if err != nil {
			return info, fmt.Errorf("wait for migration: %w", err)
		}
		switch info.Status {
		case "completed":
			return info, nil
		case "failed", "cancelled":
			return info, fmt.Errorf("wait for migration: %w",
				&MigrationError{Status: info.Status, Desc: info.ErrorDesc})
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-m.done:
			t.Stop()
			return info, fmt.Errorf("wait for migration: %w", m.err)
		case <-ctx.Done():
			t.Stop()
			return info, fmt.Errorf("wait for migration (last status %q): %w", info.Status, context.Cause(ctx))
		}
		delay = min(delay*2, migrationPollMax)
	}
}
