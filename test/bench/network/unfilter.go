package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandlotv1 "github.com/sandlot-dev/sandlot/api/v1alpha1"
	"github.com/sandlot-dev/sandlot/shim/podnet"
	"github.com/sandlot-dev/sandlot/test/sbxtest"
)

// The shim's pod table (shim/podnet): its two base chains, each hooked to
// ingress on one device, forward a frame to the other device once every
// check passed.
const (
	podTable   = "sandlot"
	fromVM     = "from_vm"
	toVM       = "to_vm"
	dupDevReg1 = 1
)

// bareForward turns the sandbox's pod filter into the floor: each base
// chain duplicates every frame to the other device and drops the
// original, as the shim's own forward does, with no check before it.
func (b *bench) bareForward(ctx context.Context, s *sandlotv1.Sandbox) error {
	var pod corev1.Pod
	if err := b.k.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Status.PodName}, &pod); err != nil {
		return err
	}
	pid, _, ok := sbxtest.FindQEMU(string(pod.UID))
	if !ok {
		return fmt.Errorf("no QEMU of pod %s", pod.UID)
	}
	return podnet.Run(fmt.Sprintf("/proc/%d/ns/net", pid), func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		table := &nftables.Table{Name: podTable, Family: nftables.TableFamilyNetdev}
		pod, tap, err := podDevices()
		if err != nil {
			return err
		}
		// from_vm hooks the tap and forwards to the pod's interface; to_vm
		// the other way.
		for chain, to := range map[string]string{fromVM: pod, toVM: tap} {
			ifc, err := net.InterfaceByName(to)
			if err != nil {
				return err
			}
			ch := &nftables.Chain{Name: chain, Table: table}
			conn.FlushChain(ch)
			conn.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: dupTo(ifc.Index)})
		}
		return conn.Flush()
	})
}

func dupTo(ifindex int) []expr.Any {
	idx := make([]byte, 4)
	binary.NativeEndian.PutUint32(idx, uint32(ifindex))
	return []expr.Any{
		&expr.Immediate{Register: dupDevReg1, Data: idx},
		&expr.Dup{RegDev: dupDevReg1, IsRegDevSet: true},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// podDevices are the pod's interface (the CNI's eth0) and the VM's tap,
// the only other one (the base chains' devices, which this nftables
// library does not list).
func podDevices() (pod, tap string, err error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", "", err
	}
	var others []string
	for _, i := range ifs {
		switch {
		case i.Name == "eth0":
			pod = i.Name
		case i.Flags&net.FlagLoopback == 0:
			others = append(others, i.Name)
		}
	}
	if pod == "" || len(others) != 1 {
		return "", "", fmt.Errorf("want eth0 and one tap in the pod's netns, found eth0=%q and %v", pod, others)
	}
	return pod, others[0], nil
}
