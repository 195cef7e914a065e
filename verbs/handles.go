package verbs

import (
	"unsafe"

	"github.com/softroce/softroce/internal/engine"
)

// Each object is the engine's object under a verbs type: a *QP and the
// engine's *QP are the same pointer, so converting either way is free,
// keeps nil as nil and keeps identity (the engine hands back the very
// *QP the caller holds, in AsyncEvent.QP, QPInitAttr.SendCQ, MR.PD, ...).
// The struct's only field is the engine's object, at offset 0, so the
// pointer conversions through unsafe.Pointer are sound.

func (v *Device) eng() *engine.Device { return (*engine.Device)(unsafe.Pointer(v)) }

func wrapDevice(e *engine.Device) *Device { return (*Device)(unsafe.Pointer(e)) }

func (v *CompChannel) eng() *engine.CompChannel { return (*engine.CompChannel)(unsafe.Pointer(v)) }

func wrapCompChannel(e *engine.CompChannel) *CompChannel { return (*CompChannel)(unsafe.Pointer(e)) }

func (v *CQ) eng() *engine.CQ { return (*engine.CQ)(unsafe.Pointer(v)) }

func wrapCQ(e *engine.CQ) *CQ { return (*CQ)(unsafe.Pointer(e)) }

func (v *PD) eng() *engine.PD { return (*engine.PD)(unsafe.Pointer(v)) }

func wrapPD(e *engine.PD) *PD { return (*PD)(unsafe.Pointer(e)) }

func (v *MR) eng() *engine.MR { return (*engine.MR)(unsafe.Pointer(v)) }

func wrapMR(e *engine.MR) *MR { return (*MR)(unsafe.Pointer(e)) }

func (v *MW) eng() *engine.MW { return (*engine.MW)(unsafe.Pointer(v)) }

func wrapMW(e *engine.MW) *MW { return (*MW)(unsafe.Pointer(e)) }

func (v *QP) eng() *engine.QP { return (*engine.QP)(unsafe.Pointer(v)) }

func wrapQP(e *engine.QP) *QP { return (*QP)(unsafe.Pointer(e)) }

func (v *SRQ) eng() *engine.SRQ { return (*engine.SRQ)(unsafe.Pointer(v)) }

func wrapSRQ(e *engine.SRQ) *SRQ { return (*SRQ)(unsafe.Pointer(e)) }

func (v *AH) eng() *engine.AH { return (*engine.AH)(unsafe.Pointer(v)) }

func wrapAH(e *engine.AH) *AH { return (*AH)(unsafe.Pointer(e)) }

func (v *FakeClock) eng() *engine.FakeClock { return (*engine.FakeClock)(unsafe.Pointer(v)) }

func wrapFakeClock(e *engine.FakeClock) *FakeClock { return (*FakeClock)(unsafe.Pointer(e)) }
