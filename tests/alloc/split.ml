(* tests/alloc/split.ml — a known split of allocated bytes between three
   functions, for the allocation profile (tests/alloc/run.py):
     small_tuples  50%  4-field tuples (5 words with the header), main domain
     big_arrays    30%  2000-element arrays (major heap directly), half in
                        the main domain, half in a second domain
     mid_bytes     20%  Bytes of 200 bytes (27 words), in the second domain,
                        inside a deep effect handler that it performs to
   Run: split.exe OUT.flm RATE|cpu [live|live2 [SECONDS]] (cpu: CPU samples only;
   live2: live tracking with the second domain running). With "live", every tenth small tuple
   and the list cell that keeps it stay reachable until the end (64 bytes
   in 848 allocated by small_tuples), and the second domain's work runs in
   the main domain: OCaml 5.3's Memprof reports some blocks that another
   domain's minor collection promotes as collected (doc/design.md). *)

type _ Effect.t += Tick : int -> unit Effect.t

let unit = 2_000_000 (* words: 16 MB per tenth of the total *)
let sink = Array.make 8 (Obj.repr 0)
let kept = ref []
let keep_live = ref false

(* Each block is stored where the optimiser cannot see it dead. *)
let[@inline never] store i v = Array.unsafe_set sink (i land 7) (Obj.repr v)

let[@inline never] small_tuples words =
  for i = 1 to words / 5 do
    let t = (i, i + 1, i + 2, i + 3) in
    store i t;
    if !keep_live && i mod 10 = 0 then kept := Obj.repr t :: !kept
  done

let[@inline never] big_arrays words =
  for i = 1 to words / 2001 do
    store i (Array.make 2000 i)
  done

let[@inline never] mid_bytes words =
  for i = 1 to words / 27 do
    store i (Bytes.create 200);
    if i mod 1000 = 0 then Effect.perform (Tick i)
  done

let in_handler f =
  Effect.Deep.match_with f ()
    {
      retc = (fun () -> ());
      exnc = raise;
      effc =
        (fun (type a) (e : a Effect.t) ->
          match e with
          | Tick _ -> Some (fun (k : (a, unit) Effect.Deep.continuation) -> Effect.Deep.continue k ())
          | _ -> None);
    }

let[@inline never] second_domain () =
  big_arrays (15 * unit / 10);
  in_handler (fun () -> mid_bytes (2 * unit))

let () =
  let out = Sys.argv.(1) in
  let alloc = match Sys.argv.(2) with "cpu" -> None | r -> Some (float_of_string r) in
  (* live: one domain; live2: live tracking with the second domain *)
  let mode = if Array.length Sys.argv > 3 then Sys.argv.(3) else "" in
  let live = mode = "live" || mode = "live2" in
  keep_live := live;
  (* SECONDS: the whole split again until the process has used that much
     CPU (a profile in segments needs a run of several periods, whatever
     the machine's speed); the shares stay those of one round. *)
  let secs = if Array.length Sys.argv > 4 then float_of_string Sys.argv.(4) else 0. in
  Flamme.start ~output:out ?alloc ~live ();
  let round () =
    let d = if mode = "live" then None else Some (Domain.spawn second_domain) in
    small_tuples (5 * unit);
    big_arrays (15 * unit / 10);
    match d with Some d -> Domain.join d | None -> second_domain ()
  in
  round ();
  while Sys.time () < secs do round () done;
  Flamme.stop ();
  (* the kept tuples stay reachable until the profile stopped *)
  ignore (Sys.opaque_identity !kept)
