// Field slots of ExecuTorch's schema/program.fbs (declaration order; a union takes
// two slots: its type, then its value). Internal to the runtime.
#pragma once

namespace kiln::runtime::schema {

enum ProgramSlot {
  kVersion,
  kExecutionPlan,
  kConstantBuffer,
  kBackendDelegateData,
  kSegments,
  kConstantSegment,
  kMutableDataSegments,
  kNamedData
};
enum PlanSlot {
  kName,
  kContainerMetaType,
  kValues,
  kInputs,
  kOutputs,
  kChains,
  kOperators,
  kDelegates,
  kNonConstBufferSizes,
  kNonConstBufferDevice
};
enum TensorSlot {
  kScalarType,
  kStorageOffset,
  kSizes,
  kDimOrder,
  kRequiresGrad,
  kDataBufferIdx,
  kAllocationInfo,
  kLayout,
  kShapeDynamism,
  kExtraTensorInfo
};
enum ExtraTensorInfoSlot { kMutableDataSegmentsIdx, kFullyQualifiedName, kLocation, kDeviceType, kDeviceIndex };
enum ChainSlot { kChainInputs, kChainOutputs, kInstructions, kStacktrace };
enum DelegateSlot { kId, kProcessed, kCompileSpecs };
enum InstructionKind { kKernelCall = 1, kDelegateCall, kMoveCall, kJumpFalseCall, kFreeCall };

}  // namespace kiln::runtime::schema
