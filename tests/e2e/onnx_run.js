// onnx_run.js - runs ONNX models in onnxruntime-node for the ONNX test (onnx_export.py): each job
// {model, input, output} reads a .npy input (float32, uint8 or int64), runs the model on the
// CPU and writes its first output as a float32 .npy. One process for every job, so the runtime
// loads once.
//     NODE_PATH=DIR/node_modules node onnx_run.js JOBS.json
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

const TYPES = { '<f4': ['float32', Float32Array], '|u1': ['uint8', Uint8Array],
                '<i8': ['int64', BigInt64Array] };

function readNpy(path) {
    const buf = fs.readFileSync(path);
    const hlen = buf.readUInt16LE(8);
    const header = buf.toString('latin1', 10, 10 + hlen);
    const descr = /'descr': '([^']+)'/.exec(header)[1];
    const shape = /'shape': \(([^)]*)\)/.exec(header)[1].split(',').filter((s) => s.trim())
        .map((s) => parseInt(s, 10));
    const [type, Ctor] = TYPES[descr];
    const data = buf.subarray(10 + hlen);
    const copy = new Uint8Array(data.length);
    copy.set(data);
    return new ort.Tensor(type, new Ctor(copy.buffer), shape);
}

function writeNpy(path, t) {
    let dict = `{'descr': '<f4', 'fortran_order': False, 'shape': (${t.dims.join(', ')},), }`;
    while ((10 + dict.length + 1) % 64) dict += ' ';
    dict += '\n';
    const head = Buffer.alloc(10);
    Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0]).copy(head);
    head.writeUInt16LE(dict.length, 8);
    const data = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    fs.writeFileSync(path, Buffer.concat([head, Buffer.from(dict, 'latin1'), data]));
}

async function main() {
    const jobs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
    for (const job of jobs) {
        const session = await ort.InferenceSession.create(job.model,
            { executionProviders: ['cpu'], graphOptimizationLevel: 'all' });
        const feeds = { [session.inputNames[0]]: readNpy(job.input) };
        const result = await session.run(feeds);
        writeNpy(job.output, result[session.outputNames[0]]);
    }
}

main().catch((e) => {
    console.error(`onnx_run.js: ${e.stack || e}`);
    process.exit(1);
});
