package verbs

import (
	"testing"

	"github.com/softroce/softroce/internal/engine"
)

// constTwins pairs each verbs constant with the engine's of the same name.
var constTwins = []struct {
	name       string
	verbs, eng uint64
}{
	{"MulticastQPN", uint64(MulticastQPN), uint64(engine.MulticastQPN)},
	{"ReregChangeTranslation", uint64(ReregChangeTranslation), uint64(engine.ReregChangeTranslation)},
	{"ReregChangePD", uint64(ReregChangePD), uint64(engine.ReregChangePD)},
	{"ReregChangeAccess", uint64(ReregChangeAccess), uint64(engine.ReregChangeAccess)},
	{"MWType1", uint64(MWType1), uint64(engine.MWType1)},
	{"MWType2", uint64(MWType2), uint64(engine.MWType2)},
	{"MaxMW", uint64(MaxMW), uint64(engine.MaxMW)},
	{"QPTypeRC", uint64(QPTypeRC), uint64(engine.QPTypeRC)},
	{"QPTypeUC", uint64(QPTypeUC), uint64(engine.QPTypeUC)},
	{"QPTypeUD", uint64(QPTypeUD), uint64(engine.QPTypeUD)},
	{"QPStateReset", uint64(QPStateReset), uint64(engine.QPStateReset)},
	{"QPStateInit", uint64(QPStateInit), uint64(engine.QPStateInit)},
	{"QPStateRTR", uint64(QPStateRTR), uint64(engine.QPStateRTR)},
	{"QPStateRTS", uint64(QPStateRTS), uint64(engine.QPStateRTS)},
	{"QPStateSQD", uint64(QPStateSQD), uint64(engine.QPStateSQD)},
	{"QPStateSQE", uint64(QPStateSQE), uint64(engine.QPStateSQE)},
	{"QPStateErr", uint64(QPStateErr), uint64(engine.QPStateErr)},
	{"AccessLocalWrite", uint64(AccessLocalWrite), uint64(engine.AccessLocalWrite)},
	{"AccessRemoteWrite", uint64(AccessRemoteWrite), uint64(engine.AccessRemoteWrite)},
	{"AccessRemoteRead", uint64(AccessRemoteRead), uint64(engine.AccessRemoteRead)},
	{"AccessRemoteAtomic", uint64(AccessRemoteAtomic), uint64(engine.AccessRemoteAtomic)},
	{"AccessMWBind", uint64(AccessMWBind), uint64(engine.AccessMWBind)},
	{"AccessZeroBased", uint64(AccessZeroBased), uint64(engine.AccessZeroBased)},
	{"AccessOnDemand", uint64(AccessOnDemand), uint64(engine.AccessOnDemand)},
	{"AccessHugeTLB", uint64(AccessHugeTLB), uint64(engine.AccessHugeTLB)},
	{"AccessFlushGlobal", uint64(AccessFlushGlobal), uint64(engine.AccessFlushGlobal)},
	{"AccessFlushPersistent", uint64(AccessFlushPersistent), uint64(engine.AccessFlushPersistent)},
	{"AccessRelaxedOrdering", uint64(AccessRelaxedOrdering), uint64(engine.AccessRelaxedOrdering)},
	{"WCSuccess", uint64(WCSuccess), uint64(engine.WCSuccess)},
	{"WCLocLenErr", uint64(WCLocLenErr), uint64(engine.WCLocLenErr)},
	{"WCLocQPOpErr", uint64(WCLocQPOpErr), uint64(engine.WCLocQPOpErr)},
	{"WCLocEECOpErr", uint64(WCLocEECOpErr), uint64(engine.WCLocEECOpErr)},
	{"WCLocProtErr", uint64(WCLocProtErr), uint64(engine.WCLocProtErr)},
	{"WCWRFlushErr", uint64(WCWRFlushErr), uint64(engine.WCWRFlushErr)},
	{"WCMWBindErr", uint64(WCMWBindErr), uint64(engine.WCMWBindErr)},
	{"WCBadRespErr", uint64(WCBadRespErr), uint64(engine.WCBadRespErr)},
	{"WCLocAccessErr", uint64(WCLocAccessErr), uint64(engine.WCLocAccessErr)},
	{"WCRemInvReqErr", uint64(WCRemInvReqErr), uint64(engine.WCRemInvReqErr)},
	{"WCRemAccessErr", uint64(WCRemAccessErr), uint64(engine.WCRemAccessErr)},
	{"WCRemOpErr", uint64(WCRemOpErr), uint64(engine.WCRemOpErr)},
	{"WCRetryExcErr", uint64(WCRetryExcErr), uint64(engine.WCRetryExcErr)},
	{"WCRNRRetryExcErr", uint64(WCRNRRetryExcErr), uint64(engine.WCRNRRetryExcErr)},
	{"WCLocRDDViolErr", uint64(WCLocRDDViolErr), uint64(engine.WCLocRDDViolErr)},
	{"WCRemInvRDReqErr", uint64(WCRemInvRDReqErr), uint64(engine.WCRemInvRDReqErr)},
	{"WCRemAbortErr", uint64(WCRemAbortErr), uint64(engine.WCRemAbortErr)},
	{"WCInvEECNErr", uint64(WCInvEECNErr), uint64(engine.WCInvEECNErr)},
	{"WCInvEECStateErr", uint64(WCInvEECStateErr), uint64(engine.WCInvEECStateErr)},
	{"WCFatalErr", uint64(WCFatalErr), uint64(engine.WCFatalErr)},
	{"WCRespTimeoutErr", uint64(WCRespTimeoutErr), uint64(engine.WCRespTimeoutErr)},
	{"WCGeneralErr", uint64(WCGeneralErr), uint64(engine.WCGeneralErr)},
	{"WCTMErr", uint64(WCTMErr), uint64(engine.WCTMErr)},
	{"WCTMRndvIncomplete", uint64(WCTMRndvIncomplete), uint64(engine.WCTMRndvIncomplete)},
	{"WCSend", uint64(WCSend), uint64(engine.WCSend)},
	{"WCRDMAWrite", uint64(WCRDMAWrite), uint64(engine.WCRDMAWrite)},
	{"WCRDMARead", uint64(WCRDMARead), uint64(engine.WCRDMARead)},
	{"WCCompSwap", uint64(WCCompSwap), uint64(engine.WCCompSwap)},
	{"WCFetchAdd", uint64(WCFetchAdd), uint64(engine.WCFetchAdd)},
	{"WCBindMW", uint64(WCBindMW), uint64(engine.WCBindMW)},
	{"WCLocalInv", uint64(WCLocalInv), uint64(engine.WCLocalInv)},
	{"WCTSO", uint64(WCTSO), uint64(engine.WCTSO)},
	{"WCFlush", uint64(WCFlush), uint64(engine.WCFlush)},
	{"WCAtomicWrite", uint64(WCAtomicWrite), uint64(engine.WCAtomicWrite)},
	{"WCRecv", uint64(WCRecv), uint64(engine.WCRecv)},
	{"WCRecvRDMAWithImm", uint64(WCRecvRDMAWithImm), uint64(engine.WCRecvRDMAWithImm)},
	{"WCWithGRH", uint64(WCWithGRH), uint64(engine.WCWithGRH)},
	{"WCWithImm", uint64(WCWithImm), uint64(engine.WCWithImm)},
	{"WCIPCsumOK", uint64(WCIPCsumOK), uint64(engine.WCIPCsumOK)},
	{"WCWithInv", uint64(WCWithInv), uint64(engine.WCWithInv)},
	{"WCTMSyncReq", uint64(WCTMSyncReq), uint64(engine.WCTMSyncReq)},
	{"WCTMMatch", uint64(WCTMMatch), uint64(engine.WCTMMatch)},
	{"WCTMDataValid", uint64(WCTMDataValid), uint64(engine.WCTMDataValid)},
	{"WRRDMAWrite", uint64(WRRDMAWrite), uint64(engine.WRRDMAWrite)},
	{"WRRDMAWriteWithImm", uint64(WRRDMAWriteWithImm), uint64(engine.WRRDMAWriteWithImm)},
	{"WRSend", uint64(WRSend), uint64(engine.WRSend)},
	{"WRSendWithImm", uint64(WRSendWithImm), uint64(engine.WRSendWithImm)},
	{"WRRDMARead", uint64(WRRDMARead), uint64(engine.WRRDMARead)},
	{"WRAtomicCmpAndSwp", uint64(WRAtomicCmpAndSwp), uint64(engine.WRAtomicCmpAndSwp)},
	{"WRAtomicFetchAndAdd", uint64(WRAtomicFetchAndAdd), uint64(engine.WRAtomicFetchAndAdd)},
	{"WRLocalInv", uint64(WRLocalInv), uint64(engine.WRLocalInv)},
	{"WRBindMW", uint64(WRBindMW), uint64(engine.WRBindMW)},
	{"WRSendWithInv", uint64(WRSendWithInv), uint64(engine.WRSendWithInv)},
	{"WRTSO", uint64(WRTSO), uint64(engine.WRTSO)},
	{"WRFlush", uint64(WRFlush), uint64(engine.WRFlush)},
	{"WRAtomicWrite", uint64(WRAtomicWrite), uint64(engine.WRAtomicWrite)},
	{"SendFence", uint64(SendFence), uint64(engine.SendFence)},
	{"SendSignaled", uint64(SendSignaled), uint64(engine.SendSignaled)},
	{"SendSolicited", uint64(SendSolicited), uint64(engine.SendSolicited)},
	{"SendInline", uint64(SendInline), uint64(engine.SendInline)},
	{"SendIPCsum", uint64(SendIPCsum), uint64(engine.SendIPCsum)},
	{"MaxSGE", uint64(MaxSGE), uint64(engine.MaxSGE)},
	{"MaxInline", uint64(MaxInline), uint64(engine.MaxInline)},
	{"QPAttrState", uint64(QPAttrState), uint64(engine.QPAttrState)},
	{"QPAttrCurState", uint64(QPAttrCurState), uint64(engine.QPAttrCurState)},
	{"QPAttrEnSQDAsyncNotify", uint64(QPAttrEnSQDAsyncNotify), uint64(engine.QPAttrEnSQDAsyncNotify)},
	{"QPAttrAccessFlags", uint64(QPAttrAccessFlags), uint64(engine.QPAttrAccessFlags)},
	{"QPAttrPKeyIndex", uint64(QPAttrPKeyIndex), uint64(engine.QPAttrPKeyIndex)},
	{"QPAttrPort", uint64(QPAttrPort), uint64(engine.QPAttrPort)},
	{"QPAttrQKey", uint64(QPAttrQKey), uint64(engine.QPAttrQKey)},
	{"QPAttrAV", uint64(QPAttrAV), uint64(engine.QPAttrAV)},
	{"QPAttrPathMTU", uint64(QPAttrPathMTU), uint64(engine.QPAttrPathMTU)},
	{"QPAttrTimeout", uint64(QPAttrTimeout), uint64(engine.QPAttrTimeout)},
	{"QPAttrRetryCnt", uint64(QPAttrRetryCnt), uint64(engine.QPAttrRetryCnt)},
	{"QPAttrRNRRetry", uint64(QPAttrRNRRetry), uint64(engine.QPAttrRNRRetry)},
	{"QPAttrRQPSN", uint64(QPAttrRQPSN), uint64(engine.QPAttrRQPSN)},
	{"QPAttrMaxQPRdAtomic", uint64(QPAttrMaxQPRdAtomic), uint64(engine.QPAttrMaxQPRdAtomic)},
	{"QPAttrAltPath", uint64(QPAttrAltPath), uint64(engine.QPAttrAltPath)},
	{"QPAttrMinRNRTimer", uint64(QPAttrMinRNRTimer), uint64(engine.QPAttrMinRNRTimer)},
	{"QPAttrSQPSN", uint64(QPAttrSQPSN), uint64(engine.QPAttrSQPSN)},
	{"QPAttrMaxDestRdAtomic", uint64(QPAttrMaxDestRdAtomic), uint64(engine.QPAttrMaxDestRdAtomic)},
	{"QPAttrPathMigState", uint64(QPAttrPathMigState), uint64(engine.QPAttrPathMigState)},
	{"QPAttrCap", uint64(QPAttrCap), uint64(engine.QPAttrCap)},
	{"QPAttrDestQPN", uint64(QPAttrDestQPN), uint64(engine.QPAttrDestQPN)},
	{"QPAttrRateLimit", uint64(QPAttrRateLimit), uint64(engine.QPAttrRateLimit)},
	{"EventCQErr", uint64(EventCQErr), uint64(engine.EventCQErr)},
	{"EventQPFatal", uint64(EventQPFatal), uint64(engine.EventQPFatal)},
	{"EventQPReqErr", uint64(EventQPReqErr), uint64(engine.EventQPReqErr)},
	{"EventQPAccessErr", uint64(EventQPAccessErr), uint64(engine.EventQPAccessErr)},
	{"EventCommEst", uint64(EventCommEst), uint64(engine.EventCommEst)},
	{"EventSQDrained", uint64(EventSQDrained), uint64(engine.EventSQDrained)},
	{"EventDeviceFatal", uint64(EventDeviceFatal), uint64(engine.EventDeviceFatal)},
	{"EventPortActive", uint64(EventPortActive), uint64(engine.EventPortActive)},
	{"EventPortErr", uint64(EventPortErr), uint64(engine.EventPortErr)},
	{"EventSRQErr", uint64(EventSRQErr), uint64(engine.EventSRQErr)},
	{"EventSRQLimitReached", uint64(EventSRQLimitReached), uint64(engine.EventSRQLimitReached)},
	{"EventQPLastWQEReached", uint64(EventQPLastWQEReached), uint64(engine.EventQPLastWQEReached)},
	{"EventGIDChange", uint64(EventGIDChange), uint64(engine.EventGIDChange)},
	{"EventMRInvalidated", uint64(EventMRInvalidated), uint64(engine.EventMRInvalidated)},
	{"PortDown", uint64(PortDown), uint64(engine.PortDown)},
	{"PortInit", uint64(PortInit), uint64(engine.PortInit)},
	{"PortArmed", uint64(PortArmed), uint64(engine.PortArmed)},
	{"PortActive", uint64(PortActive), uint64(engine.PortActive)},
	{"SRQAttrMaxWR", uint64(SRQAttrMaxWR), uint64(engine.SRQAttrMaxWR)},
	{"SRQAttrLimit", uint64(SRQAttrLimit), uint64(engine.SRQAttrLimit)},
}

// TestConstTwins checks that verbs' constants have the engine's values
// (rdma-core's numbers), and that the table names every engine constant.
func TestConstTwins(t *testing.T) {
	in := map[string]bool{}
	for _, c := range constTwins {
		in[c.name] = true
	}
	for _, n := range engineConsts(t) {
		if !in[n] {
			t.Errorf("constTwins lacks %s", n)
		}
	}
	for _, c := range constTwins {
		if c.verbs != c.eng {
			t.Errorf("%s = %#x in verbs, %#x in the engine", c.name, c.verbs, c.eng)
		}
	}
}
