(* tests/engine/deepfx.ml — an effects scheduler whose stack really gets
   deep: the handler resumes the task with a non-tail `continue`, so every
   Yield leaves a handler frame on the parent stack and the stack grows to
   ~STEPS frames (~400,000 at the default). Each step computes a little
   first, so CPU time is spread over every depth.
   Usage: deepfx.exe [STEPS]  (default 400000). Prints the main thread's CPU time
   since main began (CLOCK_THREAD_CPUTIME_ID: the agent's writer thread is
   not in it). *)
open Effect
open Effect.Deep

type _ Effect.t += Yield : unit Effect.t

let steps = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 400_000

let[@inline never] work i =
  let acc = ref i in
  for j = 1 to 1_000 do
    acc := (!acc * 31) + j
  done;
  !acc

external thread_cputime : unit -> float = "fid_thread_cputime"

(* From here on: the agent's start-up (symbol and unwind tables, in this
   thread before main) is not the program's time. *)
let cpu0 = thread_cputime ()

let task () =
  let s = ref 0 in
  for i = 1 to steps do
    s := !s + work i;
    perform Yield
  done;
  !s

let () =
  let resumed = ref 0 in
  let r =
    match_with task ()
      {
        retc = (fun s -> s);
        exnc = raise;
        effc =
          (fun (type a) (e : a Effect.t) ->
            match e with
            | Yield ->
                Some
                  (fun (k : (a, _) continuation) ->
                    incr resumed;
                    let v = continue k () in
                    v + 1 (* not a tail call: this frame stays *))
            | _ -> None);
      }
  in
  Printf.printf "deepfx: %d resumes, checksum %d, thread_cpu %.4f\n" !resumed (r land 0xffff)
    (thread_cputime () -. cpu0)
