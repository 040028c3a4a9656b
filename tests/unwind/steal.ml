(* tests/unwind/steal.ml — a fork-join pool with work stealing across
   three domains, as domainslib does it: each worker owns a Chase-Lev deque
   (an Atomic top and bottom over a growable array), pushes and pops its own
   end, and steals from a random victim with compare_and_set when it runs
   dry. The tasks are parallel fib and a parallel array map-reduce; joins
   help by running other tasks while they wait.
   Usage: steal.exe [SCALE] *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 30.))
let nworkers = 3

module Deque = struct
  type 'a t = { top : int Atomic.t; bottom : int Atomic.t; mutable tasks : 'a option Atomic.t array }

  let create () = { top = Atomic.make 0; bottom = Atomic.make 0;
                    tasks = Array.init 64 (fun _ -> Atomic.make None) }

  let grow d b t =
    let old = d.tasks and n = Array.length d.tasks in
    let a = Array.init (2 * n) (fun _ -> Atomic.make None) in
    for i = t to b - 1 do Atomic.set a.(i land (2 * n - 1)) (Atomic.get old.(i land (n - 1))) done;
    d.tasks <- a

  let push d x =
    let b = Atomic.get d.bottom and t = Atomic.get d.top in
    if b - t >= Array.length d.tasks - 1 then grow d b t;
    Atomic.set d.tasks.(b land (Array.length d.tasks - 1)) (Some x);
    Atomic.set d.bottom (b + 1)

  let pop d =
    let b = Atomic.get d.bottom - 1 in
    Atomic.set d.bottom b;
    let t = Atomic.get d.top in
    if b < t then (Atomic.set d.bottom t; None)
    else
      let x = Atomic.get d.tasks.(b land (Array.length d.tasks - 1)) in
      if b > t then x
      else begin
        let won = Atomic.compare_and_set d.top t (t + 1) in
        Atomic.set d.bottom (t + 1);
        if won then x else None
      end

  let steal d =
    let t = Atomic.get d.top in
    let b = Atomic.get d.bottom in
    if t >= b then None
    else
      let x = Atomic.get d.tasks.(t land (Array.length d.tasks - 1)) in
      if Atomic.compare_and_set d.top t (t + 1) then x else None
end

type task = unit -> unit
let deques : task Deque.t array = Array.init nworkers (fun _ -> Deque.create ())
let stop = Atomic.make false
let me = Domain.DLS.new_key (fun () -> 0)
let rng = Domain.DLS.new_key (fun () -> Random.State.make_self_init ())

let[@inline never] find_task w =
  match Deque.pop deques.(w) with
  | Some _ as t -> t
  | None ->
      let v = Random.State.int (Domain.DLS.get rng) nworkers in
      if v = w then None else Deque.steal deques.(v)

type 'a promise = 'a option Atomic.t

let async f : 'a promise =
  let p = Atomic.make None in
  Deque.push deques.(Domain.DLS.get me) (fun () -> Atomic.set p (Some (f ())));
  p

let rec await (p : 'a promise) =
  match Atomic.get p with
  | Some v -> v
  | None ->
      (match find_task (Domain.DLS.get me) with Some t -> t () | None -> Domain.cpu_relax ());
      await p

let[@inline never] rec fib n = if n < 2 then n else fib (n - 1) + fib (n - 2)

let rec pfib n =
  if n < 22 then fib n
  else let a = async (fun () -> pfib (n - 1)) in let b = pfib (n - 2) in await a + b

let rec psum (a : float array) lo hi =
  if hi - lo <= 4096 then begin
    let s = ref 0.0 in
    for i = lo to hi - 1 do s := !s +. sqrt (a.(i) *. a.(i) +. 1.0) done;
    !s
  end else
    let mid = (lo + hi) / 2 in
    let l = async (fun () -> psum a lo mid) in
    let r = psum a mid hi in
    await l +. r

let[@inline never] worker w () =
  Domain.DLS.set me w;
  while not (Atomic.get stop) do
    match find_task w with Some t -> t () | None -> Domain.cpu_relax ()
  done

let () =
  let ds = List.init (nworkers - 1) (fun i -> Domain.spawn (worker (i + 1))) in
  let arr = Array.init 1_000_000 float_of_int in
  let acc = ref 0.0 in
  for _ = 1 to rounds do
    acc := !acc +. float_of_int (pfib 30) +. psum arr 0 (Array.length arr)
  done;
  Atomic.set stop true;
  List.iter Domain.join ds;
  Printf.printf "steal: %d\n" (int_of_float !acc land 0xffff)
