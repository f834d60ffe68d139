package install

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestLeaving(t *testing.T) {
	key := client.ObjectKey{Namespace: "sandlot-system", Name: "sandlot-agent"}
	ds := func(deleting bool) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if deleting {
			now := metav1.Now()
			d.DeletionTimestamp, d.Finalizers = &now, []string{"test"}
		}
		return d
	}
	failing := func(err error) interceptor.Funcs {
		return interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return err
		}}
	}
	gr := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	for _, tc := range []struct {
		name    string
		objs    []client.Object
		funcs   interceptor.Funcs
		want    bool
		wantErr bool
	}{
		{name: "rolling update: the DaemonSet is there", objs: []client.Object{ds(false)}},
		{name: "DaemonSet being deleted", objs: []client.Object{ds(true)}, want: true},
		{name: "DaemonSet gone", want: true},
		{name: "RBAC gone", funcs: failing(apierrors.NewForbidden(gr, key.Name, errors.New("no"))), want: true},
		{name: "ServiceAccount gone", funcs: failing(apierrors.NewUnauthorized("token")), want: true},
		{name: "API unreachable: keep the runtime", funcs: failing(errors.New("connection refused")), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := runtime.NewScheme()
			if err := appsv1.AddToScheme(s); err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(tc.objs...).WithInterceptorFuncs(tc.funcs).Build()
			got, err := Leaving(context.Background(), c, key)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("Leaving = %v, %v; want %v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
