package e2b

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A team's credentials through the API, E2B's way: API keys (X-API-KEY)
// run sandboxes; access tokens (Authorization: Bearer sk_e2b_...) manage
// the team's keys and tokens (/api-keys, /access-tokens: a key cannot,
// so a leaked key cannot mint others or revoke the team's) and may do
// everything a key may. `sandlot-api issue-token --team` makes a team's
// first token, as issue-key its first key. Both are stored as salted
// hashes in Secrets of the API's namespace: keys in the team's keys
// Secret (LabelTeam), tokens in a Secret labelled LabelAccessTokens, never
// LabelTeam, so that a token is never a key.

// LabelAccessTokens marks a Secret holding the access tokens of a team.
const LabelAccessTokens = "sandlot.dev/access-tokens-of"

// annotationCredentials is a Secret's JSON map of entry -> credentialInfo:
// names, creation times and masks of what the API made or renamed.
const annotationCredentials = "sandlot.dev/credentials"

const (
	accessTokenPrefix = "sk_e2b_"
	apiKeyPrefix      = "e2b_"
	// maxCredentials bounds a team's keys, and its tokens.
	maxCredentials = 100
	maxNameLen     = 128
)

// credentialKind is API keys or access tokens.
type credentialKind struct {
	prefix string
	label  string // the Secret's label naming the team
	noun   string
}

var (
	apiKeys      = credentialKind{prefix: apiKeyPrefix, label: LabelTeam, noun: "API key"}
	accessTokens = credentialKind{prefix: accessTokenPrefix, label: LabelAccessTokens, noun: "access token"}
)

// secretName is where the API adds a team's credentials of this kind:
// issue-key's names for keys, <keys-secret>-access-tokens-<team> for tokens.
func (k credentialKind) secretName(cfg *Config, team string) string {
	if k == accessTokens {
		return cfg.KeysSecret + "-access-tokens-" + team
	}
	if team == cfg.Namespace {
		return cfg.KeysSecret
	}
	return cfg.KeysSecret + "-" + team
}

type credentialInfo struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	Mask      maskJSON  `json:"mask"`
}

// maskJSON is E2B's IdentifierMaskingDetails.
type maskJSON struct {
	Prefix            string `json:"prefix"`
	ValueLength       int    `json:"valueLength"`
	MaskedValuePrefix string `json:"maskedValuePrefix"`
	MaskedValueSuffix string `json:"maskedValueSuffix"`
}

// credential is one stored key or token.
type credential struct {
	ID     string
	Info   credentialInfo
	secret client.ObjectKey
	entry  string
}

func maskOf(prefix, raw string) maskJSON {
	body := strings.TrimPrefix(raw, prefix)
	return maskJSON{Prefix: prefix, ValueLength: len(body), MaskedValuePrefix: body[:2], MaskedValueSuffix: body[len(body)-4:]}
}

// credentialID is an entry's stable ID, shaped as a UUID: a digest of its
// Secret and entry (an entry issue-key made has no other).
func credentialID(secret, entry string) string {
	sum := sha256.Sum256([]byte(secret + "/" + entry))
	b := sum[:16]
	b[6], b[8] = b[6]&0x0f|0x50, b[8]&0x3f|0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// credentials lists team's stored credentials of kind, from r.
func (s *Server) credentials(ctx context.Context, r client.Reader, kind credentialKind, team string) ([]credential, error) {
	list := &corev1.SecretList{}
	if err := r.List(ctx, list, client.InNamespace(s.cfg.Namespace)); err != nil {
		return nil, err
	}
	var out []credential
	for i := range list.Items {
		sec := &list.Items[i]
		if !kind.holds(&s.cfg, sec, team) {
			continue
		}
		infos := credentialInfos(sec)
		for entry := range sec.Data {
			info, ok := infos[entry]
			if !ok {
				info = credentialInfo{Name: entry, CreatedAt: sec.CreationTimestamp.Time, Mask: maskJSON{Prefix: kind.prefix}}
			}
			out = append(out, credential{ID: credentialID(sec.Name, entry), Info: info, secret: client.ObjectKeyFromObject(sec), entry: entry})
		}
	}
	slices.SortFunc(out, func(a, b credential) int { return a.Info.CreatedAt.Compare(b.Info.CreatedAt) })
	return out, nil
}

// holds reports whether sec is one of team's Secrets of this kind, as
// keySets (and tokenTeam) read them.
func (k credentialKind) holds(cfg *Config, sec *corev1.Secret, team string) bool {
	if k == apiKeys && team == cfg.Namespace && sec.Name == cfg.KeysSecret {
		return true
	}
	return sec.Labels[k.label] == team && sec.Name != cfg.KeysSecret
}

func credentialInfos(sec *corev1.Secret) map[string]credentialInfo {
	infos := map[string]credentialInfo{}
	_ = json.Unmarshal([]byte(sec.Annotations[annotationCredentials]), &infos) // unreadable: names are the entries'
	return infos
}

// addCredential draws a new credential of kind for team, stores its hash
// and returns it with the raw value, shown this once.
func (s *Server) addCredential(ctx context.Context, kind credentialKind, team, name string) (credential, string, error) {
	raw, err := newCredential(kind.prefix)
	if err != nil {
		return credential{}, "", err
	}
	hash, err := HashAPIKey(raw)
	if err != nil {
		return credential{}, "", err
	}
	suffix, err := newCredential("")
	if err != nil {
		return credential{}, "", err
	}
	entry := "api-" + suffix[:16] // the Secret's name for it: random, tells nothing of raw
	info := credentialInfo{Name: name, CreatedAt: s.now().UTC().Truncate(time.Second), Mask: maskOf(kind.prefix, raw)}
	key := client.ObjectKey{Namespace: s.cfg.Namespace, Name: kind.secretName(&s.cfg, team)}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		return s.editSecret(ctx, key, kind, team, func(sec *corev1.Secret, infos map[string]credentialInfo) error {
			if len(sec.Data) >= maxCredentials {
				return fmt.Errorf("%w: team %s has %d %ss", errTeamFull, team, len(sec.Data), kind.noun)
			}
			sec.Data[entry], infos[entry] = []byte(hash), info
			return nil
		})
	})
	return credential{ID: credentialID(key.Name, entry), Info: info, secret: key, entry: entry}, raw, err
}

func newCredential(prefix string) (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("draw a credential: %w", err)
	}
	return prefix + hex.EncodeToString(b), nil
}

// editSecret reads the Secret at key (made, labelled for team, when it is
// not there), lets edit change its data and infos, and writes it back.
func (s *Server) editSecret(ctx context.Context, key client.ObjectKey, kind credentialKind, team string,
	edit func(*corev1.Secret, map[string]credentialInfo) error) error {
	sec := &corev1.Secret{}
	err := s.kube.direct.Get(ctx, key, sec)
	create := apierrors.IsNotFound(err)
	switch {
	case create:
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		if key.Name != s.cfg.KeysSecret {
			sec.Labels = map[string]string{kind.label: team}
		}
	case err != nil:
		return err
	case !kind.holds(&s.cfg, sec, team):
		return fmt.Errorf("secret %s is not team %s's %ss", key, team, kind.noun)
	}
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	infos := credentialInfos(sec)
	if err := edit(sec, infos); err != nil {
		return err
	}
	text, err := json.Marshal(infos)
	if err != nil {
		return err
	}
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	sec.Annotations[annotationCredentials] = string(text)
	wait := s.kube.waitSeen
	if create {
		err, wait = s.kube.Create(ctx, sec), s.kube.waitPresent
	} else {
		err = s.kube.Update(ctx, sec)
	}
	if err != nil {
		return err
	}
	// Answered once this API's cache holds the change: the caller's next
	// request (a list after a rename) reads it there. (The issue-key and
	// issue-token commands write without a cache.)
	if s.kube.changed == nil {
		return nil
	}
	if aerr := wait(ctx, sec); aerr != nil {
		return errors.New(aerr.Message)
	}
	return nil
}

// changeCredential renames (name != "") or removes the team's credential
// id; false when the team has none such.
func (s *Server) changeCredential(ctx context.Context, kind credentialKind, team, id, name string) (bool, error) {
	found := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		all, err := s.credentials(ctx, s.kube.direct, kind, team)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(all, func(c credential) bool { return c.ID == id })
		if found = i >= 0; !found {
			return nil
		}
		c := all[i]
		return s.editSecret(ctx, c.secret, kind, team, func(sec *corev1.Secret, infos map[string]credentialInfo) error {
			if name == "" {
				delete(sec.Data, c.entry)
				delete(infos, c.entry)
				return nil
			}
			c.Info.Name = name
			infos[c.entry] = c.Info
			return nil
		})
	})
	return found, err
}

// tokenTeam is the team whose access token this is ("" for none).
func (s *Server) tokenTeam(ctx context.Context, r client.Reader, token string) (string, error) {
	list := &corev1.SecretList{}
	if err := r.List(ctx, list, client.InNamespace(s.cfg.Namespace), client.HasLabels{LabelAccessTokens}); err != nil {
		return "", err
	}
	team := ""
	for i := range list.Items {
		sec := &list.Items[i]
		t := sec.Labels[LabelAccessTokens]
		if !slices.Contains(s.cfg.Namespaces(), t) || sec.Name == s.cfg.KeysSecret {
			continue // a token of a team not served opens nothing
		}
		for _, v := range sec.Data {
			if keyMatches(token, string(v)) {
				team = t
			}
		}
	}
	return team, nil
}

// errTeamFull is a team with maxCredentials of a kind already.
var errTeamFull = fmt.Errorf("no more than %d a team", maxCredentials)

// credentialError is a 500 naming what failed, or the 400 of a full team.
func credentialError(what string, err error) *apiError {
	if errors.Is(err, errTeamFull) {
		return errorf(http.StatusBadRequest, "%s: %v", what, err)
	}
	return errorf(http.StatusInternalServerError, "%s: %v", what, err)
}

// IssueAccessToken stores a new access token of team (the Secrets of
// namespace, whose keys Secret is keysSecret) and returns it: `sandlot-api
// issue-token`, a team's first token, before any could make another.
func IssueAccessToken(ctx context.Context, c client.Client, namespace, keysSecret, team, name string) (string, error) {
	s := &Server{cfg: Config{Namespace: namespace, KeysSecret: keysSecret}, kube: &Kube{Client: c, direct: c}, now: time.Now}
	_, raw, err := s.addCredential(ctx, accessTokens, team, name)
	return raw, err
}
