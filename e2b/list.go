package e2b

import (
	"cmp"
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
)

// listSandboxesV1 is the old list: running sandboxes, no pages.
func (s *Server) listSandboxesV1(_ http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	filter, err := parseMetadataQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		return 0, nil, err
	}
	items, err := s.matching(r.Context(), filter, map[string]bool{"running": true}, "")
	if err != nil {
		return 0, nil, err
	}
	out := make([]*sandboxDetail, 0, len(items))
	for _, sbx := range items {
		out = append(out, s.detail(r.Context(), sbx, false))
	}
	return http.StatusOK, out, nil
}

// listSandboxes is GET /v2/sandboxes: filters metadata, state,
// template and startedAfter; pages of limit (default and at most 100)
// ordered by start time, newest first unless order=asc, the next page's
// token in x-next-token.
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	q, err := parseListQuery(r.URL.Query())
	if err != nil {
		return 0, nil, err
	}
	items, err := s.matching(r.Context(), q.metadata, q.states, q.template)
	if err != nil {
		return 0, nil, err
	}
	items = slices.DeleteFunc(items, func(sbx *sandlotv1.Sandbox) bool { return startedAt(sbx).Before(q.startedAfter) })
	page, next, err := paginateOrdered(items, q.nextToken, q.limit, func(sbx **sandlotv1.Sandbox) pageKey {
		return pageKey{startedAt(*sbx), sandlotv1.SandboxIDFor((*sbx).UID)}
	}, q.desc)
	if err != nil {
		return 0, nil, err
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := make([]*sandboxDetail, 0, len(page))
	for _, sbx := range page {
		out = append(out, s.detail(r.Context(), sbx, false))
	}
	return http.StatusOK, out, nil
}

// listQuery is GET /v2/sandboxes's query.
type listQuery struct {
	metadata     map[string]string
	states       map[string]bool
	template     string
	startedAfter time.Time
	desc         bool
	nextToken    string
	limit        int
}

func parseListQuery(q url.Values) (listQuery, *apiError) {
	lq := listQuery{states: map[string]bool{}, template: q.Get("template"), nextToken: q.Get("nextToken"), desc: true}
	var err *apiError
	if lq.metadata, err = parseMetadataQuery(q.Get("metadata")); err != nil {
		return lq, err
	}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			if st != "running" && st != "paused" {
				return lq, errorf(http.StatusBadRequest, "query \"state\": %q is neither running nor paused", st)
			}
			lq.states[st] = true
		}
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.desc = false
	default:
		return lq, errorf(http.StatusBadRequest, "query \"order\": %q is neither asc nor desc", o)
	}
	if v := q.Get("startedAfter"); v != "" {
		t, perr := time.Parse(time.RFC3339Nano, v)
		if perr != nil {
			return lq, errorf(http.StatusBadRequest, "query \"startedAfter\": %q is not an RFC 3339 date-time", v)
		}
		lq.startedAfter = t
	}
	lq.limit, err = pageLimit(q.Get("limit"))
	return lq, err
}

// startedAt is when the sandbox started, as its detail says: its start,
// or its creation while it has not started.
func startedAt(sbx *sandlotv1.Sandbox) time.Time {
	if sbx.Status.StartedAt != nil {
		return sbx.Status.StartedAt.Time
	}
	return sbx.CreationTimestamp.Time
}

// matching lists the namespace's live sandboxes with all of filter's
// metadata, in one of states (any when empty) and of template (any when "").
func (s *Server) matching(ctx context.Context, filter map[string]string, states map[string]bool, template string) ([]*sandlotv1.Sandbox, *apiError) {
	list := &sandlotv1.SandboxList{}
	// Read only (filtered, then shown): not copied out of the cache, which
	// at 10,000 sandboxes was most of a page's time; and then pointed at,
	// not copied again.
	if err := s.kube.List(ctx, list, client.InNamespace(teamOf(ctx)), client.UnsafeDisableDeepCopy); err != nil {
		return nil, kubeError("list sandboxes", err)
	}
	var out []*sandlotv1.Sandbox
	for i := range list.Items {
		sbx := &list.Items[i]
		if !listed(sbx) || sbx.Status.Phase.Terminal() || (len(states) > 0 && !states[state(sbx)]) ||
			(template != "" && templateIDOf(sbx) != template) {
			continue
		}
		if hasAll(sbx.Spec.Metadata, filter) {
			out = append(out, sbx)
		}
	}
	return out, nil
}

func hasAll(m, filter map[string]string) bool {
	for k, v := range filter {
		if got, ok := m[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// pageKey orders list items: by time, then ID.
type pageKey struct {
	at time.Time
	id string
}

func (k pageKey) compare(o pageKey) int {
	return cmp.Or(k.at.Compare(o.at), strings.Compare(k.id, o.id))
}

// token encodes the key of a page's last item: the next page starts after it.
func (k pageKey) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.at.UnixNano(), 10) + "." + k.id))
}

func parsePageToken(tok string) (pageKey, *apiError) {
	bad := errorf(http.StatusBadRequest, "query \"nextToken\": %q is not a token this API issued", tok)
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return pageKey{}, bad
	}
	ns, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return pageKey{}, bad
	}
	return pageKey{time.Unix(0, n), id}, nil
}

const maxPage = 100

func pageLimit(q string) (int, *apiError) {
	if q == "" {
		return maxPage, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > maxPage {
		return 0, errorf(http.StatusBadRequest, "query \"limit\": %q is not a number in 1..%d", q, maxPage)
	}
	return n, nil
}

// paginate sorts items by key and returns the page after token, and the
// token of the page after it ("" on the last page).
func paginate[T any](items []T, token string, limit int, key func(*T) pageKey) ([]T, string, *apiError) {
	return paginateOrdered(items, token, limit, key, false)
}

// paginateOrdered is paginate, newest (greatest key) first when desc.
func paginateOrdered[T any](items []T, token string, limit int, key func(*T) pageKey, desc bool) ([]T, string, *apiError) {
	dir := 1
	if desc {
		dir = -1
	}
	var after *pageKey
	if token != "" {
		k, err := parsePageToken(token)
		if err != nil {
			return nil, "", err
		}
		after = &k
	}
	// Each item's key once (an ID is a digest of the UID); only the items
	// after the token are ordered.
	type keyed struct {
		key pageKey
		i   int
	}
	rest := make([]keyed, 0, len(items))
	for i := range items {
		if k := key(&items[i]); after == nil || dir*k.compare(*after) > 0 {
			rest = append(rest, keyed{k, i})
		}
	}
	slices.SortFunc(rest, func(a, b keyed) int { return dir * a.key.compare(b.key) })
	next := ""
	if len(rest) > limit {
		rest = rest[:limit]
		next = rest[limit-1].key.token()
	}
	page := make([]T, 0, len(rest))
	for _, k := range rest {
		page = append(page, items[k.i])
	}
	return page, next, nil
}
