/*
 * ctrain.h - the umbrella header: includes every public module header.
 */
#ifndef CTRAIN_CTRAIN_H
#define CTRAIN_CTRAIN_H

#include "ctrain/autograd.h"
#include "ctrain/checkpoint.h"
#include "ctrain/crc32c.h"
#include "ctrain/data.h"
#include "ctrain/dist.h"
#include "ctrain/loss.h"
#include "ctrain/metrics.h"
#include "ctrain/model.h"
#include "ctrain/nn.h"
#include "ctrain/ops.h"
#include "ctrain/optim.h"
#include "ctrain/options.h"
#include "ctrain/policy.h"
#include "ctrain/rng.h"
#include "ctrain/schedule.h"
#include "ctrain/status.h"
#include "ctrain/tensor.h"
#include "ctrain/trainer.h"

#endif /* CTRAIN_CTRAIN_H */
