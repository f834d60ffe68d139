package sandboxfs

import "context"

type userKey struct{}

// WithUser returns ctx carrying the user a request acts as (from envd's
// `Authorization: Basic <user>:` header or `?username=`).
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user a request acts as, if the envd server set one.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}
