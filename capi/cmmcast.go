//go:build linux && cgo && softroce_capi

package main

/*
#include <sys/socket.h>
#include "capi.h"
#include "cm.h"
*/
import "C"

import (
	"syscall"
	"unsafe"

	"github.com/softroce/softroce/cm"
)

// rdma_join_multicast(_ex) and rdma_leave_multicast over package cm (its
// JoinMulticast attaches the ID's QP, as librdmacm does on the join
// event). The context pointer comes back as the event's
// param.ud.private_data (cmChanRec.build).

//export srgo_cm_join
func srgo_cm_join(h C.uintptr_t, sa *C.struct_sockaddr, flags C.int, ctx unsafe.Pointer) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	ap, ok := sockaddrToAddrPort(sa)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return cerr(r.id.JoinMulticast(ap.Addr(), cm.JoinFlags(flags), ctx))
}

//export srgo_cm_leave
func srgo_cm_leave(h C.uintptr_t, sa *C.struct_sockaddr) C.int {
	r, ok := cmID(h)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	ap, ok := sockaddrToAddrPort(sa)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return cerr(r.id.LeaveMulticast(ap.Addr()))
}

// mcastEvent fills in what a MULTICAST_JOIN or MULTICAST_ERROR carries as
// librdmacm gives it: the UD parameters of the group (JOIN), the join's
// context as private_data, no private data length.
func mcastEvent(ce *C.struct_sr_cm_event, ev *cm.Event) {
	ud := (*C.struct_rdma_ud_param)(unsafe.Pointer(&ce.ev.param))
	if ev.UD != nil {
		ahAttrToC(&ud.ah_attr, &ev.UD.AHAttr)
		ud.qp_num, ud.qkey = C.uint32_t(ev.UD.QPNum), C.uint32_t(ev.UD.QKey)
	}
	if p, ok := ev.Multicast.Context.(unsafe.Pointer); ok {
		ud.private_data = p
	}
	ud.private_data_len = 0
}
